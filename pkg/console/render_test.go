package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/topkeys"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Unix(1_700_000_000, 0).UnixNano())
	return c
}
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
func counting(st Status, n *atomic.Int64) func() Status {
	return func() Status { n.Add(1); return st }
}

// TestViewersShareRenders: however many viewers load the page and its
// main part at once, each is rendered (and its Status read) at most once
// per MaxAge; every viewer gets the same page. The finding: each load
// rendered the page anew, and 16 viewers took the decisions' p99 from 8 to
// 258 ms.
func TestViewersShareRenders(t *testing.T) {
	st := testStatus(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	clock := newFakeClock()
	var reads atomic.Int64
	h := Handler(Options{Status: counting(st, &reads), Logger: discard(), Now: clock.now})
	const viewers, loads = 64, 5
	round := func() {
		var wg sync.WaitGroup
		bodies := make([][2]string, viewers)
		for v := range viewers {
			wg.Go(func() {
				for range loads {
					_, bodies[v][0] = get(t, h, "/")
					_, bodies[v][1] = get(t, h, "/?part=main")
				}
			})
		}
		wg.Wait()
		for v := range viewers {
			if bodies[v] != bodies[0] {
				t.Fatalf("viewer %d got another page than viewer 0", v)
			}
		}
	}
	round()
	if n := reads.Load(); n > 2 {
		t.Errorf("%d viewers loading the page and its main part %d times each: %d renders; want at most 2, one of each", viewers, loads, n)
	}
	clock.add(MaxAge)
	round()
	if n := reads.Load(); n > 4 {
		t.Errorf("after MaxAge, another round: %d renders in all; want at most 4", n)
	}
}

// TestRenderingsOneAtATime: renderings of distinct keys run one at a time,
// at most MaxRenderings are kept, and a viewer that leaves while waiting
// is not kept waiting.
func TestRenderingsOneAtATime(t *testing.T) {
	clock := newFakeClock()
	r := NewRenderings(clock.now)
	var running, most atomic.Int64
	var wg sync.WaitGroup
	for k := range 4 * MaxRenderings {
		wg.Go(func() {
			body, err := r.Get(context.Background(), fmt.Sprint("key-", k), func() ([]byte, error) {
				n := running.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				defer running.Add(-1)
				return []byte(fmt.Sprint("body-", k)), nil
			})
			if err != nil || string(body) != fmt.Sprint("body-", k) {
				t.Errorf("key-%d: %q, %v", k, body, err)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d renderings ran at once; want 1", m)
	}
	if n := r.Len(); n > MaxRenderings {
		t.Errorf("%d renderings kept; want at most %d", n, MaxRenderings)
	}

	// A viewer waiting behind a long rendering leaves.
	release := make(chan struct{})
	started := make(chan struct{})
	go r.Get(context.Background(), "slow", func() ([]byte, error) {
		close(started)
		<-release
		return nil, nil
	})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Get(ctx, "other", func() ([]byte, error) { return nil, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a viewer gone while waiting: %v; want context.Canceled", err)
	}
	close(release)
}

// TestRenderingErrorNotKept: a rendering that failed is not served again.
func TestRenderingErrorNotKept(t *testing.T) {
	r := NewRenderings(newFakeClock().now)
	fail := errors.New("boom")
	if _, err := r.Get(context.Background(), "k", func() ([]byte, error) { return nil, fail }); !errors.Is(err, fail) {
		t.Fatalf("got %v; want the rendering's error", err)
	}
	body, err := r.Get(context.Background(), "k", func() ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(body) != "ok" {
		t.Errorf("after a failed rendering: %q, %v; want a new one", body, err)
	}
}

// BenchmarkPageRender is one rendering of the page's main part of a big
// config (MaxRows limits, MaxTopLimits limits refusing MaxTopKeys keys,
// five minutes of history): the clock moves past MaxAge every time, so
// none is shared.
func BenchmarkPageRender(b *testing.B) {
	st := benchStatus(b)
	clock := newFakeClock()
	h := Handler(Options{Status: func() Status { return st }, Logger: discard(), Now: clock.now})
	b.ReportAllocs()
	for b.Loop() {
		clock.add(MaxAge)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?part=main", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// benchStatus is a big page's Status: MaxRows limits, MaxTopLimits limits
// each refusing MaxTopKeys keys, five minutes of requests by result.
func benchStatus(tb testing.TB) Status {
	var cfg strings.Builder
	cfg.WriteString("domain: edge\ndescriptors:\n")
	for i := range MaxRows {
		fmt.Fprintf(&cfg, "  - key: k%d\n    rate_limit: {name: limit-%d, unit: second, requests_per_unit: 1}\n", i, i)
	}
	st := testStatus(tb, cfg.String())
	now := st.Now
	h := NewHistory([]string{"ok", "over_limit", "shadow_over_limit", "error"}, 300)
	for s := range 301 {
		h.Sample(now.Add(time.Duration(s-301)*time.Second), []float64{float64(1000 * s), float64(10 * s), float64(s), 0})
	}
	st.Decisions = h.Series(now)
	st.Top = nil
	for l := range MaxTopLimits {
		lim := topkeys.Limit{Limit: fmt.Sprint("limit-", l), Refused: 1000}
		for k := range MaxTopKeys {
			lim.Keys = append(lim.Keys, topkeys.Key{Key: fmt.Sprintf("remote_address=10.0.%d.%d", l, k), Count: int64(100 - k), Last: now})
		}
		st.Top = append(st.Top, lim)
	}
	return st
}
