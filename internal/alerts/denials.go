package alerts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/stats"
)

// EgressDenied is the kind of the alert of an egress denial: a connection
// or DNS query of a box that the egress policy, the guard or a limit
// refused.
const EgressDenied Kind = "egress_denied"

// DenialWindow is how often a box raises at most one egress_denied alert:
// the denials in between are held, counted, and reported together once
// the window has passed.
const DenialWindow = 10 * time.Second

// Denials turns a box's egress denials into egress_denied alerts, at most
// one per box per window, so that a box retrying a denied connection in a
// loop cannot flood the sinks (the webhook, the log, the audit trail): the
// first denial alerts at once, those that follow within the window are
// counted, and one alert reports them when the window ends. Deny is safe
// for concurrent use.
type Denials struct {
	ctx    context.Context
	sinks  []Sink
	window time.Duration
	now    func() time.Time
	after  func(time.Duration, func())

	mu    sync.Mutex
	boxes map[string]*denialState // guarded by mu
}

// denialState is what Denials remembers of one box.
type denialState struct {
	// last is when the box's last alert was raised.
	last time.Time
	// held counts the denials since, not yet reported; what and reason
	// are the newest of them.
	held         uint64
	what, reason string
	// armed is true while a timer will report the held denials.
	armed bool
}

// DenialsConfig configures Denials; the zero values are the defaults.
type DenialsConfig struct {
	// Window is DenialWindow when zero.
	Window time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// AfterFunc is time.AfterFunc when nil (tests call f themselves).
	AfterFunc func(d time.Duration, f func())
}

// NewDenials returns a Denials that sends to sinks; ctx carries the
// logger of the sinks.
func NewDenials(ctx context.Context, cfg DenialsConfig, sinks ...Sink) *Denials {
	d := &Denials{ctx: ctx, sinks: sinks, window: cfg.Window, now: cfg.Now, after: cfg.AfterFunc, boxes: map[string]*denialState{}}
	if d.window <= 0 {
		d.window = DenialWindow
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.after == nil {
		d.after = func(t time.Duration, f func()) { time.AfterFunc(t, f) }
	}
	return d
}

// Deny reports one denial of box: what was denied ("tcp
// 203.0.113.7:443 (pid 14 curl)") and why.
func (d *Denials) Deny(box, what, reason string) {
	now := d.now()
	d.mu.Lock()
	st := d.boxes[box]
	if st == nil {
		if len(d.boxes) >= sweepAt {
			d.sweepLocked(now)
		}
		st = &denialState{}
		d.boxes[box] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < d.window {
		st.held++
		st.what, st.reason = what, reason
		if !st.armed {
			st.armed = true
			d.after(d.window-now.Sub(st.last), func() { d.flush(box) })
		}
		d.mu.Unlock()
		return
	}
	// The window passed: this denial alerts, with those held before it.
	held := st.held
	st.held, st.last = 0, now
	d.mu.Unlock()
	msg := fmt.Sprintf("egress denied: %s: %s", what, reason)
	if held > 0 {
		msg += fmt.Sprintf(" (and %d more denials held back since the previous alert)", held)
	}
	d.send(Alert{Box: box, Kind: EgressDenied, Level: Warning, Value: float64(held + 1), Time: now.UTC(), Message: msg})
}

// flush reports the denials held for box, if any.
func (d *Denials) flush(box string) {
	now := d.now()
	d.mu.Lock()
	st := d.boxes[box]
	if st == nil || st.held == 0 {
		if st != nil {
			st.armed = false
		}
		d.mu.Unlock()
		return
	}
	held, what, reason := st.held, st.what, st.reason
	st.held, st.last, st.armed = 0, now, false
	d.mu.Unlock()
	d.send(Alert{Box: box, Kind: EgressDenied, Level: Warning, Value: float64(held), Time: now.UTC(),
		Message: fmt.Sprintf("egress denied %d more times within %v, held back by the rate limit; the last: %s: %s", held, d.window, what, reason)})
}

// sweepAt is how many boxes Denials remembers before it forgets those
// quiet for a while: a box removed before the sampler saw it is never
// Forgotten.
const sweepAt = 1024

// sweepLocked forgets the boxes with nothing held and no alert for ten
// windows; the caller holds mu.
func (d *Denials) sweepLocked(now time.Time) {
	for box, st := range d.boxes {
		if st.held == 0 && !st.armed && now.Sub(st.last) > 10*d.window {
			delete(d.boxes, box)
		}
	}
}

// Forget drops what is known of box (it is gone); its held denials are
// not reported.
func (d *Denials) Forget(box string) {
	d.mu.Lock()
	delete(d.boxes, box)
	d.mu.Unlock()
}

func (d *Denials) send(a Alert) {
	for _, s := range d.sinks {
		s.Alert(d.ctx, a)
	}
}

// Observe does nothing: Denials is a stats.Watcher only to be told when a
// box is gone (Forget).
func (d *Denials) Observe(string, *stats.Sample, stats.Sample) {}
