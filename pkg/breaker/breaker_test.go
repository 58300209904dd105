package breaker

import (
	"errors"
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) Now() time.Time      { return c.t }
func (c *clock) Add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Unix(1_780_000_000, 0)} }
func mustNew(t *testing.T, o Options) *Breaker {
	t.Helper()
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var errDown = errors.New("connection refused")

// call runs one call through b with outcome ok, as its users do.
func call(b *Breaker, ok bool) bool {
	probe, allowed := b.Allow()
	if !allowed {
		return false
	}
	if ok {
		b.Success(probe)
	} else {
		b.Failure(probe, errDown)
	}
	return true
}

// TestRatioNotInARow: failures scattered among many answered calls, even
// several in a row, leave the breaker closed; a failure rate past the
// ratio opens it.
func TestRatioNotInARow(t *testing.T) {
	c := newClock()
	b := mustNew(t, Options{Now: c.Now})
	for range 50 {
		call(b, true)
	}
	for i := range 1000 {
		// Bursts of 3 failures in a row, 1 call in 10 overall.
		call(b, i%100 >= 3 && i%10 != 5)
		c.Add(time.Millisecond)
	}
	if s := b.State(); s != Closed {
		t.Fatalf("after scattered failures: %v; want closed", s)
	}
	// The dependency dies: every call fails, 1 a ms, and the breaker opens
	// once they are half the last second's calls.
	for i := range 2000 {
		call(b, false)
		c.Add(time.Millisecond)
		if b.State() == Open {
			if i < 400 || i > 600 {
				t.Fatalf("opened after %d failures; want about half a window's calls (≈500)", i+1)
			}
			return
		}
	}
	t.Fatal("a dead dependency never opened the breaker")
}

// TestDeadDependencyOpensAtOnce: with nothing answered recently, MinCalls
// failures open it.
func TestDeadDependencyOpensAtOnce(t *testing.T) {
	c := newClock()
	b := mustNew(t, Options{Now: c.Now, MinCalls: 3})
	for i := range 2 {
		call(b, false)
		if s := b.State(); s != Closed {
			t.Fatalf("after %d failures: %v; want closed below MinCalls", i+1, s)
		}
	}
	call(b, false)
	if s := b.State(); s != Open {
		t.Fatalf("after MinCalls failures: %v; want open", s)
	}
	// Old successes leave the window: a second later they no longer dilute.
	b2 := mustNew(t, Options{Now: c.Now, MinCalls: 3})
	for range 100 {
		call(b2, true)
	}
	c.Add(1100 * time.Millisecond)
	for range 3 {
		call(b2, false)
	}
	if s := b2.State(); s != Open {
		t.Fatalf("failures after the successes left the window: %v; want open", s)
	}
}

// TestCooldownAndOneProbe: open, calls are refused for the cooldown; then
// one probe at a time; a failed probe reopens for another cooldown, an
// answered one closes with a fresh window.
func TestCooldownAndOneProbe(t *testing.T) {
	c := newClock()
	var changes []string
	b := mustNew(t, Options{Now: c.Now, MinCalls: 1, Cooldown: time.Second, OnChange: func(from, to State, _ error) {
		changes = append(changes, from.String()+">"+to.String())
	}})
	call(b, false)
	if _, ok := b.Allow(); ok {
		t.Fatal("open: a call was allowed within the cooldown")
	}
	c.Add(time.Second)
	probe, ok := b.Allow()
	if !probe || !ok {
		t.Fatalf("after the cooldown: probe %v, ok %v; want the probe", probe, ok)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("a second call went through while the probe was out")
	}
	b.Failure(probe, errDown)
	if _, ok := b.Allow(); ok {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	c.Add(time.Second)
	probe, _ = b.Allow()
	b.Release(probe) // the caller went away: no verdict, the next may probe
	probe, ok = b.Allow()
	if !probe || !ok {
		t.Fatal("after a released probe, no probe was allowed")
	}
	b.Success(probe)
	if s := b.State(); s != Closed {
		t.Fatalf("after an answered probe: %v; want closed", s)
	}
	// A fresh window: one more failure (MinCalls 1) reopens, but the
	// failures before the outage do not count again.
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v; want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v; want %v", changes, want)
		}
	}
}

func TestConcurrent(t *testing.T) {
	b := mustNew(t, Options{MinCalls: 1000000})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				call(b, (i+g)%3 != 0)
				b.State()
			}
		}()
	}
	wg.Wait()
	if s := b.State(); s != Closed {
		t.Fatalf("below MinCalls: %v", s)
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []Options{{FailureRatio: 1.5}, {FailureRatio: -1}, {Buckets: -1}, {MinCalls: -2}, {Window: -time.Second}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}
