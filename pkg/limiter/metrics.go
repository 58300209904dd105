package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the service's Prometheus metrics, all prefixed sluice_.
// Label values come from the config (domain, limit name) and a fixed set
// of results, so cardinality is bounded by the config; request descriptor
// values appear only in sluice_detailed_decisions_total, for limits that
// set detailed_metric. A nil *Metrics counts nothing.
//
// Metrics are safe for concurrent use.
type Metrics struct {
	// detailedMu guards detailedSeen, the descriptor labels of
	// sluice_detailed_decisions_total so far: at most MaxDetailedSeries.
	detailedMu   sync.Mutex
	detailedSeen map[string]struct{}

	requests       *prometheus.CounterVec
	tiers          *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	detailed       *prometheus.CounterVec
	refunds        *prometheus.CounterVec
	cacheHits      prometheus.Counter
	logsSuppressed prometheus.Counter
	Store          *StoreMetrics
	reference      *referenceMetrics // EnableReferenceMetrics; nil: off

	// The counters a request moves, looked up once: WithLabelValues
	// hashes the labels and takes the vec's lock at every call (three a
	// request, 1.5 % of a server's CPU on the memory store). codes is
	// filled by NewMetrics (its series exist from the start) and only
	// read; the others fill as their labels are first met, with series
	// their vecs hold from then on anyway.
	codes   map[string]prometheus.Counter
	tierOf  counters[[2]string] // tier, result
	decided counters[[3]string] // domain, limit, result
}

// Bounds on the descriptor label of sluice_detailed_decisions_total, which
// holds request values: at most MaxDetailedSeries distinct labels per
// process (further ones are counted under DetailedOverflow) and at most
// MaxDetailedLabel bytes each (a longer one is shown by its digest).
const (
	MaxDetailedSeries = 10_000
	MaxDetailedLabel  = 256
	DetailedOverflow  = "_overflow"
)

// StoreMetrics describe the store behind a StoreDecider.
//
// StoreMetrics are safe for concurrent use.
type StoreMetrics struct {
	latency     prometheus.Histogram
	errors      prometheus.Counter
	up          prometheus.Gauge
	failureMode *prometheus.CounterVec
}

// NewMetrics registers the service's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "ShouldRateLimit requests by outcome: ok, over_limit, invalid, late (a sidecar's call the store did not answer in time: the sidecar decides it), error.",
		}, []string{"code"}),
		tiers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tier_decisions_total",
			Help: "Requests by what decided them (limiter.Source: " + sourceList() + ") and result (ok, over_limit).",
		}, []string{"tier", "result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Limit decisions by domain, limit and result: ok (this limit had room; another limit of the request may still have refused it), over_limit, shadow_over_limit (a shadow-mode limit that would have rejected).",
		}, []string{"domain", "limit", "result"}),
		detailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_detailed_decisions_total",
			Help: "Decisions of detailed_metric limits, labelled with the request's descriptor values (at most 10000 labels, then _overflow; labels past 256 bytes by digest).",
		}, []string{"domain", "limit", "descriptor", "result"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_refunds_total",
			Help: "Units refunds (Envoy's is_negative_hits) asked back, by domain, limit and result: applied (given back) or clipped (beyond what the key held as consumed: a bucket already full, a window already empty, a holder holding nothing).",
		}, []string{"domain", "limit", "result"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_flag_cache_hits_total",
			Help: "Requests answered over limit from the flag cache, without a store call.",
		}),
		logsSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_log_suppressed_total",
			Help: "Rejection log lines dropped by the log rate limit.",
		}),
		Store: &StoreMetrics{
			latency: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name:    "sluice_store_duration_seconds",
				Help:    "Latency of store decisions, as requests wait for them (queueing in this process included).",
				Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
			}),
			errors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "sluice_store_errors_total",
				Help: "Store decisions that failed for the store's fault: refused or reset connections, Redis not answering (not this process being slow: see sluice_tier_decisions_total{tier=\"shed\"}).",
			}),
			up: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "sluice_store_up",
				Help: "1 while the circuit breaker is closed, 0 while it is open or probing.",
			}),
			failureMode: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_failure_mode_decisions_total",
				Help: "Requests decided by the failure mode while the store was unavailable.",
			}, []string{"mode"}),
		},
	}
	reg.MustRegister(m.requests, m.tiers, m.decisions, m.detailed, m.refunds, m.cacheHits, m.logsSuppressed,
		m.Store.latency, m.Store.errors, m.Store.up, m.Store.failureMode)
	m.Store.up.Set(1)
	// Every code from the start, so that a rate over them is 0, not
	// absent, until one happens.
	m.codes = make(map[string]prometheus.Counter)
	for _, code := range RequestCodes() {
		m.codes[code] = m.requests.WithLabelValues(code)
	}
	return m
}

func (m *StoreMetrics) observe(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}

func (m *StoreMetrics) storeError() {
	if m != nil {
		m.errors.Inc()
	}
}

func (m *StoreMetrics) setUp(up bool) {
	if m != nil {
		m.up.Set(map[bool]float64{false: 0, true: 1}[up])
	}
}

// initMode makes mode's failure-mode series exist from the start.
func (m *StoreMetrics) initMode(mode FailureMode) {
	if m != nil {
		m.failureMode.WithLabelValues(mode.String())
	}
}

func (m *StoreMetrics) failureModeDecision(mode FailureMode) {
	if m != nil {
		m.failureMode.WithLabelValues(mode.String()).Inc()
	}
}

// RequestCodes are the outcomes sluice_requests_total counts, in the
// order RequestTotals reads them.
func RequestCodes() []string { return []string{"ok", "over_limit", "invalid", "late", "error"} }

// RequestTotals reads sluice_requests_total for each of RequestCodes:
// what a page charting requests by result samples.
func (m *Metrics) RequestTotals() []float64 {
	codes := RequestCodes()
	out := make([]float64, len(codes))
	if m == nil {
		return out
	}
	var pb dto.Metric
	for i, code := range codes {
		if err := m.requests.WithLabelValues(code).Write(&pb); err == nil {
			out[i] = pb.GetCounter().GetValue()
		}
	}
	return out
}

func (m *Metrics) request(code string) {
	if m != nil {
		if c, ok := m.codes[code]; ok {
			c.Inc()
			return
		}
		m.requests.WithLabelValues(code).Inc()
	}
}

func (m *Metrics) sourceDecision(source Source, result string) {
	if m != nil {
		m.tierOf.of([2]string{string(source), result}, m.tiers).Inc()
	}
}

// refund counts a refund of asked units on a limit, given of them applied.
func (m *Metrics) refund(domain, limit string, given, asked float64) {
	if m == nil {
		return
	}
	given = min(max(given, 0), asked)
	m.refunds.WithLabelValues(domain, limit, "applied").Add(given)
	m.refunds.WithLabelValues(domain, limit, "clipped").Add(asked - given)
}

func (m *Metrics) cacheHit() {
	if m != nil {
		m.cacheHits.Inc()
	}
}

func (m *Metrics) suppressed(n int) {
	if m != nil {
		m.logsSuppressed.Add(float64(n))
	}
}

// counters are a vec's counters by their label values (K, an array of
// them), read without a lock or an allocation: a map replaced whole when a
// label is first met (a few times, then read at every request). At most
// maxCounters are kept; past them a counter is looked up in its vec every
// time.
type counters[K [2]string | [3]string] struct {
	mu sync.Mutex // orders adds
	m  atomic.Pointer[map[K]prometheus.Counter]
}

const maxCounters = 4096

// of is the counter of vec labelled k.
func (c *counters[K]) of(k K, vec *prometheus.CounterVec) prometheus.Counter {
	if m := c.m.Load(); m != nil {
		if counter, ok := (*m)[k]; ok {
			return counter
		}
	}
	var labels []string
	switch k := any(k).(type) {
	case [2]string:
		labels = k[:]
	case [3]string:
		labels = k[:]
	}
	return c.add(k, vec.WithLabelValues(labels...))
}

// add keeps counter as k's, and returns it.
func (c *counters[K]) add(k K, counter prometheus.Counter) prometheus.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxCounters {
		return counter
	}
	m := map[K]prometheus.Counter{}
	if old != nil {
		m = maps.Clone(*old)
	}
	m[k] = counter
	c.m.Store(&m)
	return counter
}

func (m *Metrics) decision(domain, limit, result string, detailed bool, values []string) {
	if m == nil {
		return
	}
	m.decided.of([3]string{domain, limit, result}, m.decisions).Inc()
	if detailed {
		m.detailed.WithLabelValues(domain, limit, m.detailedLabel(strings.Join(values, ".")), result).Inc()
	}
}

// detailedLabel bounds a detailed metric's descriptor label: in length, and
// in the number of distinct labels a process ever reports.
func (m *Metrics) detailedLabel(label string) string {
	if len(label) > MaxDetailedLabel {
		sum := sha256.Sum256([]byte(label))
		label = "sha256:" + hex.EncodeToString(sum[:])
	}
	m.detailedMu.Lock()
	defer m.detailedMu.Unlock()
	if _, ok := m.detailedSeen[label]; ok {
		return label
	}
	if len(m.detailedSeen) >= MaxDetailedSeries {
		return DetailedOverflow
	}
	if m.detailedSeen == nil {
		m.detailedSeen = make(map[string]struct{})
	}
	m.detailedSeen[label] = struct{}{}
	return label
}
