// Package atomicfile replaces files whole: a reader, or a daemon restarted
// after a crash, finds either the old content or all of the new one, never
// a truncated file. Every write goes to a temporary file in the target's
// directory (its name starts with a dot) and is renamed over the target.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces name with data, mode perm. Nothing is flushed to disk: a
// crash of the host may lose the new content (but never leaves half of it).
// For state that is rebuilt or thrown away after a reboot.
func Write(name string, data []byte, perm fs.FileMode) error {
	return write(name, data, perm, false)
}

// WriteDurable is Write that also flushes the file and its directory, so
// that the new content survives a crash of the host once it returns.
func WriteDurable(name string, data []byte, perm fs.FileMode) error {
	return write(name, data, perm, true)
}

func write(name string, data []byte, perm fs.FileMode, durable bool) error {
	dir := filepath.Dir(name)
	tmp, err := temp(dir, "."+filepath.Base(name)+".tmp-*", data, perm, durable)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if durable {
		return SyncDir(dir)
	}
	return nil
}

// TempFile writes data, mode perm, to a new file in dir whose name starts
// with ".tmp-", flushed to disk, and returns its path. The caller renames or
// links it into place (see WriteDurable) and removes it on failure.
func TempFile(dir string, data []byte, perm fs.FileMode) (string, error) {
	return temp(dir, ".tmp-*", data, perm, true)
}

func temp(dir, pattern string, data []byte, perm fs.FileMode, durable bool) (string, error) {
	f, err := os.CreateTemp(dir, pattern) // mode 0600
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && perm != 0o600 {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// Sync flushes the file or directory p (not followed if it is a symlink)
// to disk.
func Sync(p string) error { return syncPath(p, syscall.O_NOFOLLOW) }

// SyncDir flushes the directory entries of dir (a rename or a link made in
// it) to disk.
func SyncDir(dir string) error { return syncPath(dir, 0) }

// syncPath opens p read-only with the extra open flags and fsyncs it.
func syncPath(p string, flags int) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_CLOEXEC|flags, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	return nil
}
