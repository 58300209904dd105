package limiter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testkit/corecfg"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/global"
)

// testConfig has a limit of each kind the core's rules speak of.
const testConfig = corecfg.Edge

// t0 is 15 s into a minute of the Unix epoch, in µs.
const t0 = corecfg.T0

// clockStore runs the in-memory store at an injected time and counts
// calls; while err is set, every call fails with it. Its fields are set
// between calls, by the test's goroutine.
type clockStore struct {
	m     *global.Memory
	now   atomic.Int64 // µs
	calls atomic.Int64
	err   error
}

func (c *clockStore) Decide(_ context.Context, items []algorithm.Item, out []algorithm.Result) error {
	c.calls.Add(1)
	if c.err != nil {
		return c.err
	}
	return c.m.DecideAt(items, out, c.now.Load())
}

// clock is the store's time, for Options.Now and StoreOptions.Now.
func (c *clockStore) clock() time.Time { return time.UnixMicro(c.now.Load()) }

func newClockStore(t testing.TB) *clockStore {
	c := &clockStore{m: newMemory(t)}
	c.now.Store(t0)
	return c
}

func newMemory(t testing.TB) *global.Memory {
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memoryAt is an in-memory store deciding at an injected time (µs).
type memoryAt struct {
	m   *global.Memory
	now *atomic.Int64
}

func (m *memoryAt) Decide(_ context.Context, items []algorithm.Item, out []algorithm.Result) error {
	return m.m.DecideAt(items, out, m.now.Load())
}

func mustConfig(t testing.TB, src string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// configOf is a fixed config for Options.Config.
func configOf(t testing.TB, src string) func() *config.Config {
	cfg := mustConfig(t, src)
	return func() *config.Config { return cfg }
}

// harness is a Service deciding on a clockStore, as the server runs it:
// behind a StoreDecider unless the options name a Decider, counting in a
// registry of its own.
type harness struct {
	svc     *Service
	store   *clockStore
	decider *StoreDecider // nil when the options named a Decider
	metrics *Metrics
	reg     *prometheus.Registry
}

// start returns a harness: opts' Config defaults to testConfig, Now to the
// store's clock; the StoreDecider's failure mode is error.
func start(t testing.TB, opts Options) *harness {
	t.Helper()
	return startStore(t, opts, StoreOptions{})
}

// startStore is start with the StoreDecider's options so: its Store
// defaults to the harness's clockStore, its Fallback to an in-memory
// store, its Now to the store's clock, its Metrics to the harness's.
func startStore(t testing.TB, opts Options, so StoreOptions) *harness {
	t.Helper()
	h := &harness{store: newClockStore(t), reg: prometheus.NewRegistry()}
	if opts.Config == nil {
		opts.Config = configOf(t, testConfig)
	}
	if opts.Now == nil {
		opts.Now = h.store.clock
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(h.reg)
	}
	h.metrics = opts.Metrics
	if opts.Decider == nil {
		if so.Store == nil {
			so.Store = h.store
		}
		if so.Fallback == nil {
			// On the store's injected clock: on the real one, a fixed
			// window's end could fall between two requests of a test.
			so.Fallback = &memoryAt{m: newMemory(t), now: &h.store.now}
		}
		if so.Now == nil {
			so.Now = h.store.clock
		}
		if so.Metrics == nil {
			so.Metrics = opts.Metrics.Store
		}
		d, err := NewStoreDecider(so)
		if err != nil {
			t.Fatal(err)
		}
		h.decider, opts.Decider = d, d
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.svc = s
	return h
}

// newService is the Service of a harness on config src.
func newService(t *testing.T, src string, opts Options) *Service {
	t.Helper()
	opts.Config = configOf(t, src)
	return start(t, opts).svc
}

// decide decides r as a client's request (with the answer's content),
// failing the test on an error.
func (h *harness) decide(t testing.TB, r Request) *Answer {
	t.Helper()
	a, err := h.svc.Decide(context.Background(), r, DecideOptions{Content: true})
	if err != nil {
		t.Fatalf("Decide(%v) = %v", r, err)
	}
	return a
}

// requests is sluice_requests_total{code}.
func (h *harness) requests(code string) float64 {
	return testutil.ToFloat64(h.metrics.requests.WithLabelValues(code))
}

// decided is sluice_tier_decisions_total{tier=source, result}.
func (h *harness) decided(source Source, result string) float64 {
	return testutil.ToFloat64(h.metrics.tiers.WithLabelValues(string(source), result))
}

// verdict is an answer's codes as "OVERALL:STATUS,STATUS...".
func verdict(a *Answer) string {
	name := func(c Code) string {
		switch c {
		case OK:
			return "OK"
		case OverLimit:
			return "OVER_LIMIT"
		}
		return "UNKNOWN"
	}
	var s []string
	for _, st := range a.Statuses {
		s = append(s, name(st.Code))
	}
	return name(a.Overall) + ":" + strings.Join(s, ",")
}

// headerMap is an answer's headers by name.
func headerMap(a *Answer) map[string]string {
	m := make(map[string]string, len(a.Headers))
	for _, h := range a.Headers {
		m[h.Key] = h.Value
	}
	return m
}
