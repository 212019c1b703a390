package alerts

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDenialsRateLimited checks that a box denied in a loop raises one
// alert per window, that the denials held back are counted and reported
// when the window ends, and that boxes are limited apart.
func TestDenialsRateLimited(t *testing.T) {
	c := &collect{}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var timers []func()
	d := NewDenials(context.Background(), DenialsConfig{
		Window:    10 * time.Second,
		Now:       func() time.Time { return now },
		AfterFunc: func(_ time.Duration, f func()) { timers = append(timers, f) },
	}, c)

	d.Deny("a", "tcp 203.0.113.7:443", "not in the allowlist")
	got := c.take()
	if len(got) != 1 || got[0].Kind != EgressDenied || got[0].Value != 1 || got[0].Box != "a" {
		t.Fatalf("first denial: alerts = %+v; want one egress_denied of a with value 1", got)
	}
	// A loop: 1,000 denials within the window raise nothing more now.
	for range 1000 {
		now = now.Add(time.Millisecond)
		d.Deny("a", "tcp 203.0.113.7:443", "not in the allowlist")
	}
	if got := c.take(); len(got) != 0 {
		t.Fatalf("denials within the window: %d alerts; want none", len(got))
	}
	if len(timers) != 1 {
		t.Fatalf("timers armed = %d; want 1", len(timers))
	}
	// Another box is not held back by a's loop.
	d.Deny("b", "dns example.com", "not in the allowlist")
	if got := c.take(); len(got) != 1 || got[0].Box != "b" {
		t.Fatalf("other box: alerts = %+v; want one of b", got)
	}
	// The window ends: one alert reports the 1,000 held back.
	now = now.Add(10 * time.Second)
	timers[0]()
	got = c.take()
	if len(got) != 1 || got[0].Value != 1000 || !strings.Contains(got[0].Message, "1000 more times") {
		t.Fatalf("window end: alerts = %+v; want one reporting 1000 denials", got)
	}
	// Nothing held: a timer that fires again reports nothing.
	timers[0]()
	if got := c.take(); len(got) != 0 {
		t.Fatalf("second flush: %d alerts; want none", len(got))
	}
	// After a quiet window a denial alerts at once again.
	now = now.Add(11 * time.Second)
	d.Deny("a", "tcp 203.0.113.7:80", "not in the allowlist")
	if got := c.take(); len(got) != 1 || got[0].Value != 1 {
		t.Fatalf("after a quiet window: alerts = %+v; want one with value 1", got)
	}
	// A removed box's held denials are forgotten.
	d.Deny("a", "tcp 203.0.113.7:80", "not in the allowlist")
	d.Forget("a")
	timers[len(timers)-1]()
	if got := c.take(); len(got) != 0 {
		t.Fatalf("after Forget: %d alerts; want none", len(got))
	}
}

// TestDenialsSweep checks that boxes quiet for long are forgotten once
// many are remembered (a box removed before the sampler saw it is never
// told to Forget).
func TestDenialsSweep(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := NewDenials(context.Background(), DenialsConfig{Now: func() time.Time { return now }, AfterFunc: func(time.Duration, func()) {}}, &collect{})
	for i := range sweepAt {
		d.Deny(fmt.Sprintf("box%d", i), "tcp 203.0.113.7:443", "denied")
	}
	now = now.Add(11 * DenialWindow)
	d.Deny("new", "tcp 203.0.113.7:443", "denied")
	d.mu.Lock()
	n := len(d.boxes)
	d.mu.Unlock()
	if n != 1 {
		t.Errorf("boxes remembered after a sweep = %d; want 1 (the new one)", n)
	}
}
