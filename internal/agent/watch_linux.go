package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/corral-sandbox/corral/api/gen/filesystem"
)

// maxWatchEvents bounds the events a watcher keeps for a slow or absent
// reader; older events are dropped.
const maxWatchEvents = 10000

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func timeOf(ts unix.Timespec) time.Time { return time.Unix(ts.Unix()) }

func newKeepalive() *time.Ticker { return time.NewTicker(keepaliveInterval) }

// watcher turns inotify events under a directory into FilesystemEvents.
type watcher struct {
	s         *fsService
	root      string
	recursive bool
	entry     bool
	fd        int      // the inotify fd
	f         *os.File // fd wrapped for pollable reads
	notify    chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// guarded by mu
	dirs map[int32]string // watch descriptor -> directory
	// guarded by mu
	events []*pb.FilesystemEvent
	// guarded by mu
	err error
}

func newWatcher(s *fsService, root string, recursive, entry bool) (*watcher, error) {
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("%s is not a directory: %w", root, errInvalidArgument)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	w := &watcher{
		s: s, root: root, recursive: recursive, entry: entry,
		fd:     fd,
		f:      os.NewFile(uintptr(fd), "inotify"),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		dirs:   make(map[int32]string),
	}
	if err := w.add(root); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.loop()
	return w, nil
}

// add watches dir, and its subdirectories when recursive.
func (w *watcher) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.mu.Unlock()
	if !w.recursive {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // removed meanwhile
	}
	for _, e := range ents {
		if e.Type().IsDir() {
			_ = w.add(path.Join(dir, e.Name()))
		}
	}
	return nil
}

func (w *watcher) loop() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			select {
			case <-w.done:
			default:
				w.fail(fmt.Errorf("read inotify: %w", err))
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event { s32 wd; u32 mask, cookie, len; char name[]; }
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			end := off + unix.SizeofInotifyEvent + nameLen
			if end > n {
				break
			}
			name := string(trimNUL(buf[off+unix.SizeofInotifyEvent : end]))
			w.handle(wd, mask, name)
			off = end
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func (w *watcher) handle(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.fail(errors.New("watch: event queue overflow"))
		return
	}
	w.mu.Lock()
	dir, ok := w.dirs[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd)
	}
	w.mu.Unlock()
	if !ok || name == "" {
		return
	}
	p := path.Join(dir, name)
	var t pb.EventType
	switch {
	case mask&unix.IN_CREATE != 0, mask&unix.IN_MOVED_TO != 0:
		t = pb.EventType_EVENT_TYPE_CREATE
		if w.recursive && mask&unix.IN_ISDIR != 0 {
			_ = w.add(p)
		}
	case mask&unix.IN_MODIFY != 0, mask&unix.IN_CLOSE_WRITE != 0:
		t = pb.EventType_EVENT_TYPE_WRITE
	case mask&unix.IN_DELETE != 0:
		t = pb.EventType_EVENT_TYPE_REMOVE
	case mask&unix.IN_MOVED_FROM != 0:
		t = pb.EventType_EVENT_TYPE_RENAME
	case mask&unix.IN_ATTRIB != 0:
		t = pb.EventType_EVENT_TYPE_CHMOD
	default:
		return
	}
	ev := &pb.FilesystemEvent{Name: relName(w.root, p), Type: t}
	if w.entry && t != pb.EventType_EVENT_TYPE_REMOVE && t != pb.EventType_EVENT_TYPE_RENAME {
		if e, err := w.s.entryInfo(p); err == nil {
			ev.Entry = e
		}
	}
	w.mu.Lock()
	if len(w.events) >= maxWatchEvents {
		w.events = w.events[1:]
	}
	w.events = append(w.events, ev)
	w.mu.Unlock()
	w.wake()
}

func (w *watcher) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *watcher) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.wake()
}

func (w *watcher) drain() []*pb.FilesystemEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.events
	w.events = nil
	return evs
}

func (w *watcher) error() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watcher) close() {
	w.closeOnce.Do(func() {
		close(w.done)
		w.f.Close()
	})
}
