// Package meta is Corral's persistent metadata: a bbolt database at
// <root>/meta.db with one bucket per kind of record and JSON values. Every
// write is in a transaction that bbolt fsyncs before the write returns, so
// a record written before a resource is made survives a kill -9 of the
// daemon. Writes that arrive while a transaction commits share the next one
// (group commit, see writer).
package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/volume"
)

// FileName is the database file under the daemon's root.
const FileName = "meta.db"

// Buckets, one per kind.
var (
	bucketSandboxes = []byte("sandboxes")
	bucketMeta      = []byte("meta")
	bucketVolumes   = []byte("volumes")
)

// schemaVersion is stored in the meta bucket; a newer one is refused.
const schemaVersion = 1

// DB is the metadata database. It implements sandbox.Store and is safe for
// concurrent use.
type DB struct {
	db *bolt.DB
	w  writer
}

// writer commits puts and deletes in groups. bbolt runs one read-write
// transaction at a time and holds its lock through the two fdatasyncs of
// the commit (about a millisecond each on a virtual disk), so with several
// sandboxes created and removed at once most of a write's time went to
// waiting for the others' commits. Now the first writer to find no commit
// running leads: it commits every write queued so far in one transaction
// and hands their results back; writes that arrive meanwhile wait, and one
// of them leads the next group. A write returns only once its own
// transaction is on disk, as before, and writes from one goroutine keep
// their order. Nothing waits for company: a write that finds no commit
// running commits at once.
type writer struct {
	mu   sync.Mutex
	cond *sync.Cond // on mu: a group has committed
	// busy is set while a leader commits; queued writes wait for the next
	// group. Guarded by mu.
	busy    bool
	pending []*write // guarded by mu
	// groups counts the groups committed (tests read it). Guarded by mu.
	groups int
}

// write is one queued put (val != nil) or delete (val == nil).
type write struct {
	bucket []byte
	key    string
	val    []byte
	done   bool  // guarded by writer.mu
	err    error // set before done
}

var (
	_ sandbox.Store  = (*DB)(nil)
	_ volume.Records = (*DB)(nil)
)

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
	d.w.cond = sync.NewCond(&d.w.mu)
	if err := b.Update(func(tx *bolt.Tx) error {
		for _, n := range [][]byte{bucketSandboxes, bucketMeta, bucketVolumes} {
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

// PutVolume implements volume.Records.
func (d *DB) PutVolume(ctx context.Context, v *volume.Volume) error {
	if v.Name == "" {
		return fmt.Errorf("put volume: empty name: %w", errdefs.ErrInvalidArgument)
	}
	return d.put(bucketVolumes, v.Name, v)
}

// DeleteVolume implements volume.Records.
func (d *DB) DeleteVolume(ctx context.Context, name string) error {
	return d.del(bucketVolumes, name)
}

// ListVolumes implements volume.Records; records come in name order.
func (d *DB) ListVolumes(ctx context.Context) ([]*volume.Volume, error) {
	var out []*volume.Volume
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketVolumes).ForEach(func(k, v []byte) error {
			var rec volume.Volume
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("volume %s: %w", k, err)
			}
			out = append(out, &rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

func (d *DB) put(bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	if err := d.write(&write{bucket: bucket, key: key, val: b}); err != nil {
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
	if err := d.write(&write{bucket: bucket, key: key}); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

// write queues w and returns once the transaction holding it has
// committed, leading that group's commit when no other write does.
func (d *DB) write(w *write) error {
	d.w.mu.Lock()
	d.w.pending = append(d.w.pending, w)
	for d.w.busy && !w.done {
		d.w.cond.Wait()
	}
	if w.done {
		d.w.mu.Unlock()
		return w.err
	}
	// w is still queued, so the group taken here holds it.
	group := d.w.pending
	d.w.pending = nil
	d.w.busy = true
	d.w.mu.Unlock()
	d.lead(group)
	return w.err
}

// errCommitPanicked is what the other writes of a group get when its
// commit panicked in the leader (whose panic goes on up its own stack).
var errCommitPanicked = errors.New("metadata commit panicked")

// lead commits group and hands every write its result, also when the
// commit panics, so that no writer waits for ever.
func (d *DB) lead(group []*write) {
	var errs []error
	defer func() {
		d.w.mu.Lock()
		for i, g := range group {
			g.err, g.done = errCommitPanicked, true
			if errs != nil {
				g.err = errs[i]
			}
		}
		d.w.groups++
		d.w.busy = false
		d.w.cond.Broadcast()
		d.w.mu.Unlock()
	}()
	errs = d.commit(group)
}

// commit applies group in one transaction, in order. When that fails, each
// write is tried in a transaction of its own, so that one bad write does
// not fail the others.
func (d *DB) commit(group []*write) []error {
	errs := make([]error, len(group))
	err := d.db.Update(func(tx *bolt.Tx) error {
		for _, w := range group {
			if err := apply(tx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(group) == 1 {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, w := range group {
		errs[i] = d.db.Update(func(tx *bolt.Tx) error { return apply(tx, w) })
	}
	return errs
}

func apply(tx *bolt.Tx, w *write) error {
	b := tx.Bucket(w.bucket)
	if w.val == nil {
		return b.Delete([]byte(w.key))
	}
	return b.Put([]byte(w.key), w.val)
}
