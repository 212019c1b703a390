package secrets

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeTemp writes b to a new temporary file of mode 0600 in dir, flushed
// to disk, and returns its path. Its name starts with a dot, which no secret
// name does.
func writeTemp(dir string, b []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-*") // mode 0600
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// writeFileAtomic replaces dir/name with b (mode 0600) through a temporary
// file, fsync and a rename, then syncs dir, so that a crash leaves either the
// old file or the whole new one.
func writeFileAtomic(dir, name string, b []byte) error {
	tmp, err := writeTemp(dir, b)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// syncDir flushes the directory entries of dir to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
