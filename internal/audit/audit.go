// Package audit keeps the audit trail of the sandboxes: every exec, file
// operation, egress decision, lifecycle change and limit hit of a box is
// an event (rest.AuditEvent), appended to the box's JSONL file under the
// daemon's root and offered to live followers (GET /v1/events).
//
// Recording never slows the operation it records: Add queues the event
// and returns; one goroutine writes the files. A full queue drops events,
// counted, and the box's next event is preceded by a "dropped" event. A
// box's trail is bounded: its file is rotated at half of MaxBytes (one
// rotated file is kept), so the oldest events go first, and a "dropped"
// event opening each new file counts them. A removed box's trail is kept
// for Retention, for corral trajectory, then deleted.
package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/identifiers"
)

// Defaults of Config.
const (
	DefaultMaxBytes  = 4 << 20
	DefaultRetention = 24 * time.Hour
	DefaultQueue     = 4096
)

// MinMaxBytes is the smallest per-box bound: a few events.
const MinMaxBytes = 4 << 10

// Config configures a Store.
type Config struct {
	// Dir holds one <sandbox>.jsonl (and <sandbox>.jsonl.1) per box.
	Dir string
	// MaxBytes bounds a box's trail on disk (DefaultMaxBytes when zero).
	MaxBytes int64
	// Retention is how long a removed box's trail is kept
	// (DefaultRetention when zero).
	Retention time.Duration
	// Queue is how many events may wait to be written (DefaultQueue when
	// zero).
	Queue int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DetachedEnds keeps detached execs pending until CollectEnds learns
	// how they ended (see Detached); without it their exec_end is
	// recorded, without the outcome, when the client leaves.
	DetachedEnds bool
}

// Filter selects events.
type Filter struct {
	// Sandbox selects one box; empty selects all.
	Sandbox string
	// Types selects these types; empty selects all.
	Types []string
	// Since selects events at or after it; zero selects all.
	Since time.Time
	// Tail keeps only the newest Tail events of those selected; zero
	// keeps all.
	Tail int
}

// Match reports whether f selects ev.
func (f *Filter) Match(ev *rest.AuditEvent) bool {
	return (f.Sandbox == "" || f.Sandbox == ev.Sandbox) &&
		(len(f.Types) == 0 || slices.Contains(f.Types, ev.Type)) &&
		(f.Since.IsZero() || !ev.Time.Before(f.Since))
}

// Store is the audit trail of every box.
type Store struct {
	cfg   Config
	queue chan rest.AuditEvent
	done  chan struct{}
	// lost counts events dropped at a full queue, by box; guarded by mu.
	mu     sync.Mutex
	lost   map[string]uint64
	subs   map[*Follower]struct{}
	closed bool
	// pending are the detached execs waiting for their end, by box and
	// pid, npending their number; guarded by mu.
	pending  map[string]map[uint32]*pendingExec
	npending int

	// Owned by the writer goroutine.
	boxes map[string]*boxFile

	// dropped counts every event lost (queue full, followers too slow).
	dropped atomic.Uint64
	// flushReq asks the writer to signal once the queue before it is
	// written (tests, and queries that must see what was added).
	flushReq chan chan struct{}
}

// boxFile is one box's open trail.
type boxFile struct {
	f    *os.File
	size int64
	seq  uint64
	// dropped is how many of the box's events were lost so far.
	dropped uint64
}

// Open opens the store in cfg.Dir and starts its writer; Close stops it.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxBytes < MinMaxBytes {
		return nil, fmt.Errorf("audit.max_bytes_per_box %d must be at least %d: %w", cfg.MaxBytes, MinMaxBytes, errdefs.ErrInvalidArgument)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	s := &Store{
		cfg: cfg, queue: make(chan rest.AuditEvent, cfg.Queue), done: make(chan struct{}),
		lost: map[string]uint64{}, subs: map[*Follower]struct{}{}, boxes: map[string]*boxFile{},
		pending:  map[string]map[uint32]*pendingExec{},
		flushReq: make(chan chan struct{}),
	}
	go s.run()
	return s, nil
}

// Add records ev (its Seq is set by the store; a zero Time is now). It
// never waits: when the queue is full the event is dropped and counted.
func (s *Store) Add(ev rest.AuditEvent) {
	if ev.Time.IsZero() {
		ev.Time = s.cfg.Now().UTC()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.queue <- ev:
	default:
		s.lost[ev.Sandbox]++
		s.dropped.Add(1)
	}
}

// Dropped returns how many events were lost to a full queue or to slow
// followers since the store opened.
func (s *Store) Dropped() uint64 { return s.dropped.Load() }

// Flush waits until the events added before it are written.
func (s *Store) Flush() {
	ch := make(chan struct{})
	select {
	case s.flushReq <- ch:
		<-ch
	case <-s.done:
	}
}

// Close writes what is queued and stops the store. The detached execs
// still pending get their exec_end, without the outcome.
func (s *Store) Close() error {
	s.mu.Lock()
	pending := s.pending
	s.pending, s.npending = map[string]map[uint32]*pendingExec{}, 0
	s.mu.Unlock()
	for _, box := range pending {
		for _, pe := range box {
			endUnknown(pe, "the end is unknown: the daemon stopped before the command ended")
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	for f := range s.subs {
		delete(s.subs, f)
		close(f.c)
	}
	s.mu.Unlock()
	<-s.done
	return nil
}

func (s *Store) run() {
	defer close(s.done)
	defer func() {
		for _, b := range s.boxes {
			b.f.Close()
		}
	}()
	for {
		select {
		case ev, ok := <-s.queue:
			if !ok {
				return
			}
			s.write(ev)
		case ch := <-s.flushReq:
			for n := len(s.queue); n > 0; n-- {
				ev, ok := <-s.queue
				if !ok {
					break
				}
				s.write(ev)
			}
			close(ch)
		}
	}
}

func (s *Store) path(id string) string { return filepath.Join(s.cfg.Dir, id+".jsonl") }

// write appends ev to its box's trail and offers it to the followers.
func (s *Store) write(ev rest.AuditEvent) {
	if !validID(ev.Sandbox) {
		return
	}
	b, err := s.open(ev.Sandbox)
	if err != nil {
		return // the disk refuses: the event goes to the followers only
	}
	s.mu.Lock()
	lost := s.lost[ev.Sandbox]
	delete(s.lost, ev.Sandbox)
	s.mu.Unlock()
	if lost > 0 {
		b.dropped += lost
		s.append(b, ev.Sandbox, rest.AuditEvent{Time: ev.Time, Sandbox: ev.Sandbox, Type: rest.AuditDropped, Dropped: b.dropped})
	}
	s.append(b, ev.Sandbox, ev)
	if ev.Type == rest.AuditLifecycle && ev.Lifecycle != nil && ev.Lifecycle.Change == "removed" {
		b.f.Close()
		delete(s.boxes, ev.Sandbox)
	}
}

// append writes ev as the box's next event, rotating first when the file
// would pass half the bound.
func (s *Store) append(b *boxFile, id string, ev rest.AuditEvent) {
	ev.Seq = b.seq + 1
	line, err := json.Marshal(ev)
	if err != nil {
		return
	}
	if b.size > 0 && b.size+int64(len(line))+1 > s.cfg.MaxBytes/2 {
		s.rotate(b, id, ev.Time) // may add a dropped event first
		if ev.Seq != b.seq+1 {
			ev.Seq = b.seq + 1
			if line, err = json.Marshal(ev); err != nil {
				return
			}
		}
	}
	b.seq = ev.Seq
	line = append(line, '\n')
	if n, err := b.f.Write(line); err == nil {
		b.size += int64(n)
	}
	s.broadcast(&ev)
}

// rotate moves the box's file to .1, dropping the previous .1, whose
// events are counted, and opens the new file with a "dropped" event.
func (s *Store) rotate(b *boxFile, id string, now time.Time) {
	p := s.path(id)
	if n, err := countLines(p + ".1"); err == nil {
		b.dropped += n
	}
	b.f.Close()
	os.Rename(p, p+".1")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		// Keep writing the rotated file rather than lose events.
		f, _ = os.OpenFile(p+".1", os.O_WRONLY|os.O_APPEND, 0o600)
	}
	b.f, b.size = f, 0
	if b.dropped > 0 {
		b.seq++
		ev := rest.AuditEvent{Seq: b.seq, Time: now, Sandbox: id, Type: rest.AuditDropped, Dropped: b.dropped}
		if line, err := json.Marshal(ev); err == nil {
			if n, err := b.f.Write(append(line, '\n')); err == nil {
				b.size += int64(n)
			}
		}
		s.broadcast(&ev)
	}
}

// open returns the box's open trail, opening it (and reading its last
// sequence number and drop count) when needed.
func (s *Store) open(id string) (*boxFile, error) {
	if b := s.boxes[id]; b != nil {
		return b, nil
	}
	p := s.path(id)
	b := &boxFile{}
	last := func(ev rest.AuditEvent) error {
		b.seq = max(b.seq, ev.Seq)
		if ev.Type == rest.AuditDropped {
			b.dropped = max(b.dropped, ev.Dropped)
		}
		return nil
	}
	if err := readFiles([]string{p + ".1", p}, last); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	b.f, b.size = f, st.Size()
	s.boxes[id] = b
	return b, nil
}

// Query calls fn for every recorded event f selects, oldest first (by
// sequence within a box, by time across boxes), and returns fn's first
// error. Events added before Query are seen once written (Flush).
func (s *Store) Query(f Filter, fn func(rest.AuditEvent) error) error {
	s.Flush()
	var ids []string
	if f.Sandbox != "" {
		if !validID(f.Sandbox) {
			return fmt.Errorf("sandbox %q: %w", f.Sandbox, errdefs.ErrInvalidArgument)
		}
		ids = []string{f.Sandbox}
	} else {
		ents, err := os.ReadDir(s.cfg.Dir)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		for _, e := range ents {
			if id, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok {
				ids = append(ids, id)
			}
		}
	}
	var all []rest.AuditEvent
	byTime := func(a, b rest.AuditEvent) int { return a.Time.Compare(b.Time) }
	for _, id := range ids {
		p := s.path(id)
		if !f.Since.IsZero() {
			// A trail last written before Since holds nothing after it.
			if st, err := os.Stat(p); err == nil && st.ModTime().Before(f.Since) {
				continue
			}
		}
		var box []rest.AuditEvent
		if err := readFiles([]string{p + ".1", p}, func(ev rest.AuditEvent) error {
			if f.Match(&ev) {
				box = append(box, ev)
				if f.Tail > 0 && len(box) >= 2*f.Tail {
					box = append(box[:0], box[len(box)-f.Tail:]...)
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("read the audit trail of %s: %w", id, err)
		}
		if f.Tail > 0 && len(box) > f.Tail {
			box = box[len(box)-f.Tail:]
		}
		all = append(all, box...)
		if f.Tail > 0 && len(all) >= 2*f.Tail {
			slices.SortStableFunc(all, byTime)
			all = append(all[:0], all[len(all)-f.Tail:]...)
		}
	}
	if len(ids) > 1 {
		slices.SortStableFunc(all, byTime)
	}
	if f.Tail > 0 && len(all) > f.Tail {
		all = all[len(all)-f.Tail:]
	}
	for _, ev := range all {
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

// Has reports whether a trail of box id is kept.
func (s *Store) Has(id string) bool {
	if !validID(id) {
		return false
	}
	_, err := os.Stat(s.path(id))
	return err == nil
}

// Prune deletes the trails of the boxes that are gone (exists reports
// false) and were last written more than Retention ago.
func (s *Store) Prune(exists func(id string) bool) {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return
	}
	cut := s.cfg.Now().Add(-s.cfg.Retention)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || exists(id) {
			continue
		}
		if info, err := e.Info(); err != nil || info.ModTime().After(cut) {
			continue
		}
		os.Remove(s.path(id) + ".1")
		os.Remove(s.path(id))
	}
}

// Follower receives new events its filter selects on C until the context
// given to Follow ends or the store closes; then C is closed. A follower
// that does not keep up loses events (Dropped), never slows the store.
type Follower struct {
	C       <-chan rest.AuditEvent
	c       chan rest.AuditEvent
	filter  Filter
	dropped atomic.Uint64
}

// Dropped returns how many events the follower lost.
func (f *Follower) Dropped() uint64 { return f.dropped.Load() }

// Follow returns a follower of the events written from now on.
func (s *Store) Follow(ctx context.Context, filter Filter, buffer int) *Follower {
	if buffer <= 0 {
		buffer = 1024
	}
	c := make(chan rest.AuditEvent, buffer)
	f := &Follower{C: c, c: c, filter: filter}
	s.mu.Lock()
	if s.closed {
		close(c)
		s.mu.Unlock()
		return f
	}
	s.subs[f] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[f]; ok {
			delete(s.subs, f)
			close(f.c)
		}
	})
	return f
}

func (s *Store) broadcast(ev *rest.AuditEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.subs {
		if !f.filter.Match(ev) {
			continue
		}
		select {
		case f.c <- *ev:
		default:
			f.dropped.Add(1)
			s.dropped.Add(1)
		}
	}
}

// readFiles decodes the events of the files at paths in order; a missing
// file is skipped, a line cut by a crash too.
func readFiles(paths []string, fn func(rest.AuditEvent) error) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = decode(f, fn)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func decode(r io.Reader, fn func(rest.AuditEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev rest.AuditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return sc.Err()
}

func countLines(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return uint64(bytes.Count(b, []byte{'\n'})), nil
}

// validID reports whether id is safe as a file name.
func validID(id string) bool { return identifiers.Validate("sandbox", id) == nil }
