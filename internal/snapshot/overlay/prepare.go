package overlay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Prepare makes the writable layer key on the committed layer parent (""
// for an empty root) with a disk of opts.DiskBytes (0: the default size,
// taken from the pool when one is ready). It returns two mounts for the
// caller to perform in order: the ext4 disk image (loop) on
// <root>/active/<key>/disk, then the overlay with an empty Target (the
// root file system). Errors: ErrAlreadyExists for an existing key,
// ErrNotFound for a missing parent, ErrInvalidArgument for a bad key, size
// or an overlong chain, ErrUnavailable when mkfs.ext4 is missing.
func (s *Store) Prepare(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) ([]mount.Mount, error) {
	if err := identifiers.Validate("layer key", key); err != nil {
		return nil, err
	}
	size := opts.DiskBytes
	if size == 0 {
		size = s.opts.defaultDiskBytes
	}
	if size < MinDiskBytes {
		return nil, fmt.Errorf("disk size %d is below the minimum %d: %w", size, MinDiskBytes, errdefs.ErrInvalidArgument)
	}
	size = (size + 4095) &^ 4095
	dir := s.path("active", key)
	meta := activeMeta{Key: key, Parent: parent, DiskBytes: size, Created: time.Now().UTC()}

	s.mu.Lock()
	pooled, err := s.claim(key, parent, meta)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if pooled {
		s.kickPool()
		return s.mounts(key, parent)
	}
	cu := cleanup.Make(func() { _ = os.RemoveAll(dir) })
	defer cu.Clean()
	if err := os.Mkdir(filepath.Join(dir, "disk"), 0o755); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", key, err)
	}
	if err := s.format(ctx, filepath.Join(dir, "disk.img"), size, false); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", key, err)
	}
	ms, err := s.mounts(key, parent)
	if err != nil {
		return nil, err
	}
	cu.Release()
	return ms, nil
}

// claim makes active/<key> holding meta.json, from a pooled disk when one of
// the right size is ready (then it is complete and claim reports true).
// Called with mu held, which every creator of active dirs holds, so the
// existence check stands.
func (s *Store) claim(key, parent string, meta activeMeta) (bool, error) {
	if _, err := s.lowerDirs(parent); err != nil {
		return false, err
	}
	dir := s.path("active", key)
	if _, err := os.Lstat(dir); err == nil {
		return false, fmt.Errorf("writable layer %q: %w", key, errdefs.ErrAlreadyExists)
	}
	pooled := false
	if meta.DiskBytes == s.opts.defaultDiskBytes && len(s.pool) > 0 {
		p := s.pool[len(s.pool)-1]
		s.pool = s.pool[:len(s.pool)-1]
		if err := os.Rename(p, dir); err == nil {
			pooled = true
		} else {
			_ = os.RemoveAll(p)
		}
	}
	if !pooled {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return false, fmt.Errorf("prepare %s: %w", key, err)
		}
	}
	// The directory (listed by Active) is the record; meta.json, written
	// under mu so that readers under mu never see it half written, says
	// which layers it uses.
	if err := writeFileExcl(filepath.Join(dir, "meta.json"), meta); err != nil {
		_ = os.RemoveAll(dir)
		return false, fmt.Errorf("prepare %s: %w", key, err)
	}
	return pooled, nil
}

// mounts returns the mounts of the writable layer key on parent.
func (s *Store) mounts(key, parent string) ([]mount.Mount, error) {
	lower, err := s.lowerDirs(parent)
	if err != nil {
		return nil, err
	}
	dir := s.path("active", key)
	img := filepath.Join(dir, "disk.img")
	disk := filepath.Join(dir, "disk")
	return []mount.Mount{
		{
			Type: "ext4", Source: img, Target: disk,
			// noinit_itable: the image is sparse, its inode tables read as
			// zeros; the lazy-init thread would only fill the host disk.
			Options: []string{"loop", "nosuid", "nodev", "noinit_itable"},
		},
		{
			Type: "overlay", Source: "overlay",
			Options: []string{
				"lowerdir=" + lower,
				"upperdir=" + filepath.Join(disk, "upper"),
				"workdir=" + filepath.Join(disk, "work"),
				"index=off",
				// Upper directories must hold plain files and whiteouts only, so
				// that Commit can turn them into layers: no redirects, no
				// metadata-only copies.
				"redirect_dir=off",
				"metacopy=off",
			},
		},
	}, nil
}

// lowerDirs returns the lowerdir option value for parent, top first. Long
// chains use the short l/<id> symlinks; a chain too long even then fails.
func (s *Store) lowerDirs(parent string) (string, error) {
	if parent == "" {
		return s.path("empty"), nil
	}
	keys, err := s.chainKeys(parent)
	if err != nil {
		return "", err
	}
	long := make([]string, len(keys))
	for i, k := range keys {
		long[i] = s.path("layers", k, "fs")
	}
	if v := strings.Join(long, ":"); len(v) <= maxLowerDirOptionLength {
		return v, nil
	}
	short := make([]string, len(keys))
	for i, k := range keys {
		link := s.path("l", shortID(k))
		target := filepath.Join("..", "layers", k, "fs")
		if got, err := os.Readlink(link); err != nil || got != target {
			_ = os.Remove(link)
			if err := os.Symlink(target, link); err != nil {
				return "", fmt.Errorf("link layer %s: %w", k, err)
			}
		}
		short[i] = link
	}
	v := strings.Join(short, ":")
	if len(v) > maxLowerDirOptionLength {
		return "", fmt.Errorf("layer %s: chain of %d layers is too long for one overlay mount: %w", parent, len(keys), errdefs.ErrInvalidArgument)
	}
	return v, nil
}

// Remove deletes the writable layer key and its disk. A missing key is
// success. It refuses with ErrFailedPrecondition while the disk is still
// mounted in the caller's mount namespace.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := identifiers.Validate("layer key", key); err != nil {
		return err
	}
	dir := s.path("active", key)
	var st, dst unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", key, err)
	}
	if err := unix.Lstat(filepath.Join(dir, "disk"), &dst); err == nil && dst.Dev != st.Dev {
		return fmt.Errorf("remove %s: its disk is still mounted: %w", key, errdefs.ErrFailedPrecondition)
	}
	// Unlinking a large sparse image can take milliseconds on a busy
	// host: it happens off the teardown path.
	if err := s.trash(dir, true); err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	log.G(ctx).Debug("writable layer removed", "layer", key)
	return nil
}

// format makes img a sparse ext4 image of size bytes holding empty upper/
// and work/ directories. The file system is made once per size, as a
// template (mkfs.ext4 costs ~10 ms of CPU, an exec and a dozen libraries),
// and every disk is a sparse copy of it: only the ~250 KiB of metadata the
// template holds is copied, in about a millisecond and without an exec.
// Copies share the template's UUID, which nothing relies on for loop
// mounts.
func (s *Store) format(ctx context.Context, img string, size int64, background bool) error {
	tpl, err := s.template(ctx, size, background)
	if err != nil {
		return err
	}
	tmp := img + ".tmp"
	if err := sparseCopy(tpl, tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk image: %w", err)
	}
	if err := os.Rename(tmp, img); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk image: %w", err)
	}
	return nil
}

// template returns the path of the formatted template disk of size bytes,
// making it with mkfs.ext4 the first time.
func (s *Store) template(ctx context.Context, size int64, background bool) (string, error) {
	s.tplMu.Lock()
	defer s.tplMu.Unlock()
	dir := s.path("templates")
	tpl := filepath.Join(dir, fmt.Sprintf("ext4-%d.img", size))
	if _, err := os.Lstat(tpl); err == nil {
		return tpl, nil
	}
	if s.opts.mkfs == "" {
		return "", fmt.Errorf("mkfs.ext4 not found: %w", errdefs.ErrUnavailable)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("disk templates: %w", err)
	}
	skel, err := s.skel()
	if err != nil {
		return "", err
	}
	tmp := tpl + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("create disk template: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("size disk template: %w", err)
	}
	// No journal (a disk never outlives a crash of its sandbox), no
	// reserved blocks, no resize inode (saves 4 MB per disk), lazily
	// initialised inode tables.
	cmd := exec.CommandContext(ctx, s.opts.mkfs, "-q", "-F", "-O", "^has_journal,^resize_inode",
		"-E", "lazy_itable_init=1,nodiscard", "-m", "0", "-d", skel, tmp)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	if err == nil {
		if background { // the pool must not slow down the create path
			_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, 19)
		}
		err = cmd.Wait()
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	if err := os.Rename(tmp, tpl); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("disk template: %w", err)
	}
	return tpl, nil
}

// sparseCopy copies src to a new file dst of the same size, copying only
// src's data extents (SEEK_DATA/SEEK_HOLE) so holes stay holes.
func sparseCopy(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	inFD, outFD := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(inFD, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole is left
			break
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(inFD, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for pos := data; pos < hole; {
			roff, woff := pos, pos
			n, err := unix.CopyFileRange(inFD, &roff, outFD, &woff, int(hole-pos), 0)
			if err != nil {
				return fmt.Errorf("copy extent: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("copy extent: %w", io.ErrUnexpectedEOF)
			}
			pos += int64(n)
		}
		off = hole
	}
	return out.Close()
}

// skel returns a directory holding empty upper/ and work/ for mkfs -d.
func (s *Store) skel() (string, error) {
	skel := s.path("skel")
	for _, d := range []string{skel, filepath.Join(skel, "upper"), filepath.Join(skel, "work")} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("disk skeleton: %w", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return "", fmt.Errorf("disk skeleton: %w", err)
		}
	}
	return skel, nil
}

// loadPool keeps the pooled disks of the default size and removes others
// (and unfinished ones).
func (s *Store) loadPool() error {
	ents, err := os.ReadDir(s.path("pool"))
	if err != nil {
		return fmt.Errorf("list disk pool: %w", err)
	}
	for _, e := range ents {
		p := s.path("pool", e.Name())
		fi, err := os.Lstat(filepath.Join(p, "disk.img"))
		if err == nil && e.IsDir() && !strings.HasPrefix(e.Name(), "tmp-") && fi.Mode().IsRegular() && fi.Size() == s.opts.defaultDiskBytes {
			s.pool = append(s.pool, p)
			continue
		}
		_ = os.RemoveAll(p)
	}
	return nil
}

// makePooled formats a default-size disk in pool/tmp-<id>/ with its mount
// point and moves it to pool/<id>/, ready to be renamed to active/<key>/.
func (s *Store) makePooled(ctx context.Context) (string, error) {
	id := randomHex()
	tmp := s.path("pool", "tmp-"+id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return "", err
	}
	err := os.Mkdir(filepath.Join(tmp, "disk"), 0o755)
	if err == nil {
		err = s.format(ctx, filepath.Join(tmp, "disk.img"), s.opts.defaultDiskBytes, true)
	}
	dst := s.path("pool", id)
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	return dst, nil
}

func (s *Store) kickPool() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// refillDelay is how long the pool filler waits after a disk was taken.
const refillDelay = 50 * time.Millisecond

// fillPool keeps the pool full until Close.
func (s *Store) fillPool() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.stop; cancel() }()
	failures := 0
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		// Let a burst of creates finish before competing with it for CPU
		// and disk; the pool serves the burst.
		select {
		case <-s.stop:
			return
		case <-time.After(refillDelay):
		}
		for {
			s.mu.Lock()
			full := len(s.pool) >= s.opts.poolSize
			s.mu.Unlock()
			if full || ctx.Err() != nil {
				break
			}
			img, err := s.makePooled(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				log.G(ctx).Warn("fill disk pool", "error", err)
				select { // back off, then try again
				case <-s.stop:
					return
				case <-time.After(time.Duration(min(failures, 60)) * time.Second):
				}
				continue
			}
			failures = 0
			s.mu.Lock()
			s.pool = append(s.pool, img)
			s.mu.Unlock()
		}
	}
}
