// Package meta is Corral's persistent metadata: a bbolt database at
// <root>/meta.db with one bucket per kind of record and JSON values. Every
// write is a transaction that bbolt fsyncs before it returns, so a record
// written before a resource is made survives a kill -9 of the daemon.
package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// FileName is the database file under the daemon's root.
const FileName = "meta.db"

// Buckets, one per kind.
var (
	bucketSandboxes = []byte("sandboxes")
	bucketMeta      = []byte("meta")
)

// schemaVersion is stored in the meta bucket; a newer one is refused.
const schemaVersion = 1

// DB is the metadata database. It implements sandbox.Store and is safe for
// concurrent use.
type DB struct {
	db *bolt.DB
}

var _ sandbox.Store = (*DB)(nil)

// Open opens or creates <root>/meta.db (mode 0600). It fails after a short
// timeout when another process holds the database.
func Open(ctx context.Context, root string) (*DB, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("open meta: %w", err)
	}
	p := filepath.Join(root, FileName)
	b, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: database is locked by another process: %w", p, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	d := &DB{db: b}
	if err := b.Update(func(tx *bolt.Tx) error {
		for _, n := range [][]byte{bucketSandboxes, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(n); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if v := m.Get([]byte("schema")); v != nil {
			var n int
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("schema version: %w", err)
			}
			if n > schemaVersion {
				return fmt.Errorf("schema version %d is newer than %d: %w", n, schemaVersion, errdefs.ErrFailedPrecondition)
			}
		}
		return m.Put([]byte("schema"), []byte(fmt.Sprint(schemaVersion)))
	}); err != nil {
		b.Close()
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return d, nil
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// PutSandbox implements sandbox.Store.
func (d *DB) PutSandbox(ctx context.Context, rec *sandbox.Record) error {
	if rec.ID == "" {
		return fmt.Errorf("put sandbox: empty id: %w", errdefs.ErrInvalidArgument)
	}
	return d.put(bucketSandboxes, rec.ID, rec)
}

// GetSandbox returns the record id; errdefs.ErrNotFound when missing.
func (d *DB) GetSandbox(ctx context.Context, id string) (*sandbox.Record, error) {
	var rec sandbox.Record
	if err := d.get(bucketSandboxes, id, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// DeleteSandbox implements sandbox.Store.
func (d *DB) DeleteSandbox(ctx context.Context, id string) error {
	return d.del(bucketSandboxes, id)
}

// ListSandboxes implements sandbox.Store; records come in ID order.
func (d *DB) ListSandboxes(ctx context.Context) ([]*sandbox.Record, error) {
	var out []*sandbox.Record
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var rec sandbox.Record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("sandbox %s: %w", k, err)
			}
			out = append(out, &rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

func (d *DB) put(bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	if err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(key), b)
	}); err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return nil
}

func (d *DB) get(bucket []byte, key string, v any) error {
	return d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get([]byte(key))
		if b == nil {
			return fmt.Errorf("%s/%s: %w", bucket, key, errdefs.ErrNotFound)
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
		}
		return nil
	})
}

func (d *DB) del(bucket []byte, key string) error {
	if err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(key))
	}); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}
