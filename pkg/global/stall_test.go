package global

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestFrozenRedisIsStalled: a Redis that stops answering (SIGSTOP:
// connections open, nothing read) fails the calls in flight and those
// queued behind them with ErrStalled, long before their callers' deadline,
// and answers again once it resumes.
func TestFrozenRedisIsStalled(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), Timeout: 20 * time.Millisecond})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: sec, Burst: 100}
	key := Key(redistest.Prefix(t), "k")
	if r := decide1(t, rs, Item{Key: key, Params: p, Cost: 1}); !r.Allowed {
		t.Fatalf("before: %+v", r)
	}
	srv.Freeze()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	took := make([]time.Duration, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			errs[i] = rs.Decide(ctx, []Item{{Key: Key(redistest.Prefix(t), fmt.Sprint(i)), Params: p, Cost: 1}}, make([]Result, 1))
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	srv.Thaw()
	for i, err := range errs {
		if !errors.Is(err, ErrStalled) {
			t.Errorf("call %d with Redis frozen: %v after %v; want ErrStalled", i, err, took[i])
		}
	}
	// Back: answered again (the writers may first wait out their
	// connections to the frozen server).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := make([]Result, 1)
		err := rs.Decide(context.Background(), []Item{{Key: key, Params: p, Cost: 1}}, out)
		if err == nil && out[0].Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after thawing: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlowProcessIsNotStalled: with this process starved of CPU (one P,
// busy goroutines preempted only every 10 ms), replies reach the writers
// late, but Redis is answering: no call fails. Redis runs at a higher
// priority, as on a host of its own: with other tests and busy loops on
// the cores, a Redis left unscheduled for 10 ms has stopped answering, and
// the store rightly says so (32 of 800 calls failed so in a loaded run).
func TestSlowProcessIsNotStalled(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Prioritize(); err != nil {
		t.Logf("redis-server's priority not raised (%v): busy cores elsewhere may stall it", err)
	}
	rs := newRedisStore(t, RedisOptions{Client: srv.Client(t), Timeout: 10 * time.Millisecond})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	prefix := redistest.Prefix(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := make(chan struct{})
	var spinners sync.WaitGroup
	for range 6 {
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 1e6; i++ { // no calls: preempted asynchronously
				}
			}
		}()
	}
	var failed atomic.Int64
	var firstErr atomic.Value
	var callers sync.WaitGroup
	for g := range 32 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			out := make([]Result, 1)
			for i := range 25 {
				if err := rs.Decide(context.Background(), []Item{{Key: Key(prefix, fmt.Sprint(g, i)), Params: p, Cost: 1}}, out); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	callers.Wait()
	close(stop)
	spinners.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 800 calls failed with Redis healthy and this process slow (first: %v)", n, firstErr.Load())
	}
}
