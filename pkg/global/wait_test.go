package global

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestDecideWithin: a call that Redis does not answer within its wait ends
// with context.DeadlineExceeded at that wait (the watchdog, much slower
// here, has not judged Redis stalled); a caller that leaves ends it with
// context.Canceled; and the pooled timers left behind cut no later call
// short.
func TestDecideWithin(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), Timeout: 10 * time.Second})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	items := []Item{{Key: Key(redistest.Prefix(t), "k"), Params: p, Cost: 1}}
	out := make([]Result, 1)
	if err := rs.DecideWithin(context.Background(), time.Second, items, out); err != nil || !out[0].Allowed {
		t.Fatalf("before: %v, %+v", err, out[0])
	}

	srv.Freeze()
	start := time.Now()
	err := rs.DecideWithin(context.Background(), 50*time.Millisecond, items, out)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("Redis frozen, a wait of 50ms: %v after %v; want DeadlineExceeded at 50ms", err, took)
	}
	// A caller that leaves is answered at its deadline (or Redis's answer)
	// with its own reason; one gone before its call is queued, at once.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	if err := rs.DecideWithin(ctx, 200*time.Millisecond, items, out); !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("the caller gone: %v after %v; want Canceled at the 200ms wait", err, time.Since(start))
	}
	if err := rs.DecideWithin(ctx, time.Minute, items, out); !errors.Is(err, context.Canceled) {
		t.Errorf("the caller gone before the call: %v; want Canceled at once", err)
	}
	if err := rs.Decide(ctx, items, out); !errors.Is(err, context.Canceled) {
		t.Errorf("the caller gone, no deadline: %v; want Canceled", err)
	}
	srv.Thaw()

	// No expiry of those waits lands on a later call (the first calls may
	// wait out connections to the frozen server).
	deadline := time.Now().Add(10 * time.Second)
	for rs.DecideWithin(context.Background(), time.Second, items, out) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Redis not answering after the thaw")
		}
	}
	for i := range 2000 {
		if err := rs.DecideWithin(context.Background(), 10*time.Second, items, out); err != nil {
			t.Fatalf("call %d after the thaw: %v", i, err)
		}
	}
}

// TestDecideWithinNoTimeLeft: a wait of 0 or less (a caller whose
// deadline has passed, the most negative duration included) ends at once:
// DeadlineExceeded, or the answer when a writer had the call first; never
// a hang or a panic.
func TestDecideWithinNoTimeLeft(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t)})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1, Window: sec, Burst: 1}
	items := []Item{{Key: Key(redistest.Prefix(t), "k"), Params: p, Cost: 1}}
	out := make([]Result, 1)
	for _, wait := range []time.Duration{0, -time.Hour, math.MinInt64} {
		start := time.Now()
		if err := rs.DecideWithin(context.Background(), wait, items, out); !errors.Is(err, context.DeadlineExceeded) && err != nil {
			t.Errorf("a wait of %v: %v; want DeadlineExceeded or an answer", wait, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("a wait of %v took %v", wait, took)
		}
	}
}

// TestExpiryNeverLandsOnALaterCall: calls whose deadlines fall about when
// Redis answers them (their expiry racing the answer), mixed with calls
// that have all the time they need, on the same pooled calls from four
// goroutines: an expiry meant for one call never ends a later one.
func TestExpiryNeverLandsOnALaterCall(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t)})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			items := []Item{{Key: Key(redistest.Prefix(t), fmt.Sprint("k", g)), Params: p, Cost: 1}}
			out := make([]Result, 1)
			for i := range 1500 {
				short := time.Duration(i%200) * time.Microsecond
				if err := rs.DecideWithin(context.Background(), short, items, out); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					errs <- fmt.Errorf("a wait of %v: %w", short, err)
					return
				}
				if err := rs.DecideWithin(context.Background(), time.Minute, items, out); err != nil {
					errs <- fmt.Errorf("call %d, a wait of a minute after one of %v: %w", i, short, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
