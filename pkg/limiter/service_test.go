package limiter

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/pkg/config"
)

// TestOptions: a Service needs a config and a Decider, a StoreDecider a
// store, a fallback and a local share in (0, 1]; every other option has a
// default: the zero Options beyond the two decide as the server does,
// counting nothing.
func TestOptions(t *testing.T) {
	cfg := configOf(t, testConfig)
	mem := newMemory(t)
	for _, o := range []Options{{}, {Config: cfg}, {Decider: Infallible{Store: mem}}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(config set %v, decider set %v) = nil error; want both required", o.Config != nil, o.Decider != nil)
		}
	}
	for _, so := range []StoreOptions{{Fallback: mem}, {Store: mem}, {Store: mem, Fallback: mem, LocalShare: 1.5}, {Store: mem, Fallback: mem, LocalShare: -1}} {
		if _, err := NewStoreDecider(so); err == nil {
			t.Errorf("NewStoreDecider(%+v) = nil error", so)
		}
	}
	d, err := NewStoreDecider(StoreOptions{Store: mem, Fallback: newMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: cfg, Decider: d})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"OK:OK", "OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		a, err := s.Decide(context.Background(), edge(desc("remote_address", "x")), DecideOptions{Content: true})
		if err != nil || verdict(a) != want {
			t.Fatalf("request %d with default options: %v, %v; want %s", i+1, a, err, want)
		}
	}
}

// TestNoConfig: until a config is loaded, requests are not decided:
// ErrNoConfig, counted as an error.
func TestNoConfig(t *testing.T) {
	h := start(t, Options{Config: func() *config.Config { return nil }})
	if _, err := h.svc.Decide(context.Background(), edge(desc("api_key", "k")), DecideOptions{}); !errors.Is(err, ErrNoConfig) {
		t.Errorf("Decide before a config: %v; want ErrNoConfig", err)
	}
	if h.requests("error") != 1 || h.store.calls.Load() != 0 {
		t.Errorf("error %v, %d store calls; want 1, none", h.requests("error"), h.store.calls.Load())
	}
}

// TestCallerGone: a caller that goes away while the store decides (Envoy
// reset the stream) gets no decision and tells the breaker nothing.
func TestCallerGone(t *testing.T) {
	d, err := NewStoreDecider(StoreOptions{Store: &lateStore{}, Fallback: newMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(Options{Config: configOf(t, testConfig), Decider: goneDecider{d, cancel}})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := s.Decide(ctx, edge(desc("api_key", "k")), DecideOptions{Content: true}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Decide with the caller gone: %v; want context.Canceled", err)
		}
	}
	if !d.Healthy() {
		t.Errorf("breaker %v after callers went away; want closed", d.State())
	}
}

// goneDecider cancels its caller's context as the store starts deciding.
type goneDecider struct {
	*StoreDecider
	cancel context.CancelFunc
}

func (g goneDecider) Decide(ctx context.Context, b *Batch) error {
	g.cancel()
	return g.StoreDecider.Decide(ctx, b)
}

// TestLargeRequest: a request past the size decided in one allocation
// (smallRequest) is decided the same way, statuses one to one, blocking
// limits among them.
func TestLargeRequest(t *testing.T) {
	h := start(t, Options{})
	r := edge(desc("api_key", "a"), desc("banned", "x"), desc("remote_address", "a"), desc("banned", "y"), desc("api_key", "b"))
	a := h.decide(t, r)
	if verdict(a) != "OVER_LIMIT:OK,OVER_LIMIT,OK,OVER_LIMIT,OK" || h.store.calls.Load() != 0 {
		t.Fatalf("%s after %d store calls; want the blocks refusing it, the store not asked", verdict(a), h.store.calls.Load())
	}
	if a.Statuses[1].RetryAfter.Seconds() != 60 || a.Statuses[3].RetryAfter.Seconds() != 60 {
		t.Errorf("statuses %+v; want the blocks to say a window", a.Statuses)
	}
}
