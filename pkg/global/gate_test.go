package global

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

func TestPipelinesFor(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		least, mean time.Duration
		allowed     int
		late        time.Duration
	}{
		{"nothing measured", 0, 0, 4, lateFloor},
		{"the wire's delay is the round trip", 2 * ms, 2 * ms, 4, 4 * ms},
		{"the wire is most of it", 3 * ms, 4 * ms, 3, 8 * ms},
		{"half", ms, 2 * ms, 2, 4 * ms},
		{"Redis's work or this process's cores are most of it", 100 * time.Microsecond, ms, 1, 2 * ms},
		{"a round trip of nothing", 0, time.Microsecond, 1, lateFloor},
		{"least past the mean (a window's edge)", 2 * ms, ms, 4, 2 * ms},
	} {
		allowed, late := pipelinesFor(4, tc.least, tc.mean)
		if allowed != tc.allowed || late != tc.late {
			t.Errorf("%s: pipelinesFor(4, %v, %v) = %d, %v; want %d, %v", tc.name, tc.least, tc.mean, allowed, late, tc.allowed, tc.late)
		}
	}
}

func TestRTTSpread(t *testing.T) {
	var w rttWindow
	now := time.Unix(1000, 0)
	if least, mean := w.spread(now); least != 0 || mean != 0 {
		t.Fatalf("empty: %v, %v", least, mean)
	}
	w.add(now, 4*time.Millisecond)
	w.add(now.Add(300*time.Millisecond), time.Millisecond)
	w.add(now.Add(600*time.Millisecond), 7*time.Millisecond)
	if least, mean := w.spread(now.Add(700 * time.Millisecond)); least != time.Millisecond || mean != 4*time.Millisecond {
		t.Errorf("three round trips: least %v, mean %v; want 1ms, 4ms", least, mean)
	}
	// A second on, the first two slices are out of the window.
	if least, mean := w.spread(now.Add(1300 * time.Millisecond)); least != 7*time.Millisecond || mean != 7*time.Millisecond {
		t.Errorf("a second on: least %v, mean %v; want 7ms, 7ms", least, mean)
	}
	if least, mean := w.spread(now.Add(3 * time.Second)); least != 0 || mean != 0 {
		t.Errorf("long after: %v, %v", least, mean)
	}
}

// slowWire delays a connection's writes: a Redis whose round trip is d
// longer, every n-th write (n > 1) on time.
type slowWire struct {
	net.Conn
	d      time.Duration
	n      int64
	writes *atomic.Int64
}

func (c slowWire) Write(b []byte) (int, error) {
	if c.n <= 1 || c.writes.Add(1)%c.n != 0 {
		time.Sleep(c.d)
	}
	return c.Conn.Write(b)
}

// onWire runs callers that decide calls each on rs, caller g pausing
// g × stagger before each, and returns the most pipelines seen on the wire
// at once after the first warm calls of each.
func onWire(t *testing.T, rs *Redis, callers, warm, calls int, stagger time.Duration) int {
	t.Helper()
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 1 << 30, Window: sec, Burst: 1 << 30}
	prefix := redistest.Prefix(t)
	var warmed sync.WaitGroup
	warmed.Add(callers)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]Result, 1)
			for i := range warm + calls {
				if i == warm {
					warmed.Done()
				}
				time.Sleep(time.Duration(g) * stagger)
				if err := rs.Decide(context.Background(), []Item{{Key: Key(prefix, fmt.Sprint(g, i)), Params: p, Cost: 1}}, out); err != nil {
					t.Errorf("caller %d, call %d: %v", g, i, err)
				}
			}
		}()
	}
	warmed.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	most := 0
	for {
		select {
		case <-done:
			return most
		case <-time.After(50 * time.Microsecond):
		}
		most = max(most, outLongerThan(rs.inflight[:rs.opts.Writers], time.Now().UnixNano(), -1))
	}
}

func slowClient(t *testing.T, srv *redistest.Server, d time.Duration, n int64) *redis.Client {
	opts := srv.Client(t).Options()
	var writes atomic.Int64
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowWire{Conn: c, d: d, n: n, writes: &writes}, nil
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// Across a network, where the wire's delay is most of the round trip, the
// writers' pipelines go out together: a call waits for no other's reply.
// (A wire of 20 ms, so that a loaded machine's scheduling delays stay a
// small part of it; the callers' calls spread over it, where callers that
// all start together would all be answered together, and the writer
// waiting for calls would take every one of them into a single pipeline.)
func TestPipelinesFillASlowWire(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: slowClient(t, srv, 20*time.Millisecond, 0), Timeout: time.Second})
	if most := onWire(t, rs, 8, 3, 6, 2500*time.Microsecond); most < 2 {
		t.Errorf("at most %d pipeline on a 20 ms wire at once; want several", most)
	}
}

// Where Redis's work is most of a round trip (the round trips of the last
// second far longer than the least of them), one pipeline goes out at a
// time and the calls gather for it: more on the wire would cost Redis and
// this process per pipeline and shorten nothing. (The window is seeded,
// so that what is tested is the gate, not a loaded machine's timings;
// TestRTTSpread tests the window.)
func TestOnePipelineWhenRedisIsTheWait(t *testing.T) {
	srv := redistest.Start(t)
	rs := newRedisStore(t, RedisOptions{Client: slowClient(t, srv, 30*time.Millisecond, 0), Timeout: time.Second})
	now := time.Now()
	rs.rtt.add(now, 50*time.Microsecond)
	for range 50 { // a mean far past the pipelines' 30 ms: none of them late on a loaded machine
		rs.rtt.add(now, 200*time.Millisecond)
	}
	if allowed, _ := rs.pipelinesAllowed(time.Now()); allowed != 1 {
		t.Fatalf("%d pipelines allowed after the seeded round trips; want 1", allowed)
	}
	if most := onWire(t, rs, 32, 0, 3, 0); most != 1 {
		t.Errorf("%d pipelines on the wire at once; want one", most)
	}
}
