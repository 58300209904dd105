package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// threePer10s is the limit the hand-computed traces are held to: 3 per
// 10 s, windows [0,10), [10,20), … from time zero.
const threePer10s = `domain: test
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      unit_multiplier: 10
      requests_per_unit: 3
  - key: vip
    rate_limit:
      unlimited: true
  - key: banned
    rate_limit:
      unit: minute
      requests_per_unit: 0
`

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string][]byte{"test.yaml": []byte(yaml)})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// at builds a one-client trace from times in seconds, each of cost 1.
func at(seconds ...float64) []Request {
	e := []config.Entry{{Key: "remote_address", Value: "10.0.0.1"}}
	trace := make([]Request, len(seconds))
	for i, s := range seconds {
		trace[i] = Request{Time: microsFromSeconds(s), Entries: e}
	}
	return trace
}

// admittedTimes lists, in seconds, the times of the requests res admitted.
func admittedTimes(trace []Request, res *Result) []float64 {
	var ts []float64
	for i, d := range res.decisions {
		if d.admitted {
			ts = append(ts, float64(trace[i].Time)/1e6)
		}
	}
	return ts
}

func TestRunKnownTraces(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	// mixed is worked through by hand for 3 per 10 s:
	//   token_bucket (0.3 token/s, 3 at most): 0→2, 1→1.3, 2→0.6, 3 has 0.9
	//   (rejected), 9→1.7, 10→1.0, 11→0.3, 12 has 0.6 (rejected), 15→0.5,
	//   25→2. gcra is the same bucket as one arrival time.
	//   fixed_window: 0,1,2 fill [0,10); 10,11,12 fill [10,20); 25.
	//   sliding_window: 0,1,2; at 10 the estimate is 3·1.0, at 11 3·0.9,
	//   at 12 3·0.8, all +1 > 3; at 15 3·0.5+1 = 2.5; at 25 1·0.5+1.
	//   sliding_log: 0,1,2; 10 once 0 leaves, 11 once 1 leaves, 12; 25.
	mixed := at(0, 1, 2, 3, 9, 10, 11, 12, 15, 25)
	// boundary puts 3 just before and 3 just after the boundary at 10 s:
	// only the fixed window admits all six, twice the limit in 0.5 s.
	boundary := at(9.7, 9.8, 9.9, 10.0, 10.1, 10.2)
	tests := []struct {
		name        string
		trace       []Request
		alg         algorithm.Kind
		admitted    []float64
		worstSecond int64
		worstWindow int64
	}{
		{"mixed/token_bucket", mixed, algorithm.TokenBucket, []float64{0, 1, 2, 9, 10, 11, 15, 25}, 1, 4},
		{"mixed/gcra", mixed, algorithm.GCRA, []float64{0, 1, 2, 9, 10, 11, 15, 25}, 1, 4},
		{"mixed/fixed_window", mixed, algorithm.FixedWindow, []float64{0, 1, 2, 10, 11, 12, 25}, 1, 3},
		{"mixed/sliding_window", mixed, algorithm.SlidingWindow, []float64{0, 1, 2, 15, 25}, 1, 3},
		{"mixed/sliding_log", mixed, algorithm.SlidingLog, []float64{0, 1, 2, 10, 11, 12, 25}, 1, 3},
		{"boundary/token_bucket", boundary, algorithm.TokenBucket, []float64{9.7, 9.8, 9.9}, 3, 3},
		{"boundary/gcra", boundary, algorithm.GCRA, []float64{9.7, 9.8, 9.9}, 3, 3},
		{"boundary/fixed_window", boundary, algorithm.FixedWindow, []float64{9.7, 9.8, 9.9, 10.0, 10.1, 10.2}, 6, 6},
		{"boundary/sliding_window", boundary, algorithm.SlidingWindow, []float64{9.7, 9.8, 9.9}, 3, 3},
		{"boundary/sliding_log", boundary, algorithm.SlidingLog, []float64{9.7, 9.8, 9.9}, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(cfg, tt.trace, Options{Domain: "test", Under: Override(tt.alg)})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := admittedTimes(tt.trace, res); !slices.Equal(got, tt.admitted) {
				t.Errorf("admitted at %v; want %v", got, tt.admitted)
			}
			l := res.Limits[0]
			want := int64(len(tt.admitted))
			if l.Path != "test.remote_address" || l.Algorithm != tt.alg.String() {
				t.Errorf("limit %s decided by %s; want test.remote_address by %s", l.Path, l.Algorithm, tt.alg)
			}
			if l.Offered != int64(len(tt.trace)) || l.Admitted != want || l.Rejected != l.Offered-want {
				t.Errorf("offered %d admitted %d rejected %d; want %d, %d, %d", l.Offered, l.Admitted, l.Rejected, len(tt.trace), want, int64(len(tt.trace))-want)
			}
			if l.WorstSecond != tt.worstSecond || l.WorstWindow != tt.worstWindow {
				t.Errorf("worst second %d, worst window %d; want %d, %d", l.WorstSecond, l.WorstWindow, tt.worstSecond, tt.worstWindow)
			}
		})
	}
}

func TestRunSeries(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	trace := at(0.5, 0.6, 0.7, 0.8, 2.1) // fixed window: the fourth is over
	res, err := Run(cfg, trace, Options{Domain: "test", Under: Override(algorithm.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	want := []Bucket{{4, 3}, {0, 0}, {1, 0}}
	if got := res.Limits[0].Series; !slices.Equal(got, want) {
		t.Errorf("series = %v; want %v", got, want)
	}
	// Half-second buckets start at the first request's bucket.
	res, err = Run(cfg, at(10.7, 11.2), Options{Domain: "test", Bucket: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.StartMicros != 10_500_000 || !slices.Equal(res.Limits[0].Series, []Bucket{{1, 1}, {1, 1}}) {
		t.Errorf("start %d, series %v; want 10500000, [{1 1} {1 1}]", res.StartMicros, res.Limits[0].Series)
	}
}

func TestRunCostUnlimitedBlockedUnmatched(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	ip := []config.Entry{{Key: "remote_address", Value: "10.0.0.1"}}
	trace := []Request{
		// Fixed window, 3 hits per [0,10): 2 fits, 2 more does not, 1 does.
		{Time: 0, Entries: ip, Cost: 2},
		{Time: 1e6, Entries: ip, Cost: 2},
		{Time: 1.5e6, Entries: ip, Cost: 1},
		{Time: 2e6, Entries: []config.Entry{{Key: "vip", Value: "a"}}},
		{Time: 2e6, Entries: []config.Entry{{Key: "vip", Value: "a"}}},
		{Time: 3e6, Entries: []config.Entry{{Key: "banned", Value: "b"}}},
		{Time: 4e6, Entries: []config.Entry{{Key: "other", Value: "c"}}},
		{Time: 5e6}, // no entries: matches nothing
	}
	res, err := Run(cfg, trace, Options{Domain: "test", Under: Override(algorithm.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unmatched != 2 || res.Requests != 8 {
		t.Errorf("unmatched %d of %d; want 2 of 8", res.Unmatched, res.Requests)
	}
	type counts struct{ offered, admitted, rejected, second, window int64 }
	want := map[string]counts{
		"test.remote_address": {3, 2, 1, 2, 3}, // hits: 2 at 0 and 1 at 1.5, 1.5 s apart
		"test.vip":            {2, 2, 0, 2, 0}, // unlimited: no window
		"test.banned":         {1, 0, 1, 0, 0},
	}
	for _, l := range res.Limits {
		got := counts{l.Offered, l.Admitted, l.Rejected, l.WorstSecond, l.WorstWindow}
		if got != want[l.Path] {
			t.Errorf("%s: %+v; want %+v", l.Path, got, want[l.Path])
		}
	}
}

func TestRunOverrideKeepsLimit(t *testing.T) {
	cfg := parseConfig(t, `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, burst: 20}
`)
	trace := []Request{{Time: 0, Entries: []config.Entry{{Key: "k", Value: "v"}}}}
	for _, tt := range []struct {
		under     Under
		alg       string
		burst     int64
		algorithm string
	}{
		{Configured, "token_bucket", 20, "configured"},
		{Override(algorithm.GCRA), "gcra", 20, "gcra"},
		{Override(algorithm.SlidingWindow), "sliding_window", 0, "sliding_window"},
	} {
		res, err := Run(cfg, trace, Options{Domain: "d", Under: tt.under})
		if err != nil {
			t.Fatal(err)
		}
		l := res.Limits[0]
		if res.Algorithm != tt.algorithm || l.Algorithm != tt.alg || l.Burst != tt.burst || l.RequestsPerUnit != 10 || l.WindowMicros != 60e6 {
			t.Errorf("under %s: run %s, limit %+v; want %s with burst %d, 10 per 60s", tt.under, res.Algorithm, l, tt.alg, tt.burst)
		}
	}
}

func TestRunErrors(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	for _, tt := range []struct {
		name  string
		trace []Request
		opts  Options
		want  string
	}{
		{"unknown domain", nil, Options{Domain: "nope"}, `domain "nope" is not configured (configured: test)`},
		{"negative cost", []Request{{Cost: -1}}, Options{Domain: "test"}, "request 0: cost -1"},
		{"negative bucket", nil, Options{Domain: "test", Bucket: -time.Second}, "bucket -1s"},
		{"too many buckets", at(0, 1e6), Options{Domain: "test", Bucket: time.Microsecond}, "use a wider bucket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(cfg, tt.trace, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestStateKeyUnambiguous(t *testing.T) {
	e := func(kv ...string) []config.Entry {
		var es []config.Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, config.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	// Each pair would collide if the parts were joined with a separator.
	pairs := [][2][]config.Entry{
		{e("a", "b;c=d"), e("a", "b", "c", "d")},
		{e("a=b", "c"), e("a", "b=c")},
		{e("a", "bc"), e("ab", "c")},
	}
	for _, p := range pairs {
		k1 := string(appendStateKey(nil, "d", "d.a", p[0]))
		k2 := string(appendStateKey(nil, "d", "d.a", p[1]))
		if k1 == k2 {
			t.Errorf("entries %v and %v share the key %q", p[0], p[1], k1)
		}
	}
	if string(appendStateKey(nil, "ab", "c", nil)) == string(appendStateKey(nil, "a", "bc", nil)) {
		t.Error("domain and path run together")
	}
}

func TestRunWorstSpansPerKey(t *testing.T) {
	cfg := parseConfig(t, threePer10s)
	// Two clients each spend the whole limit in the same second: each key
	// had 3, never 6, and the limit saw two keys.
	trace := append(at(1, 1.2, 1.4), at(1.1, 1.3, 1.5)...)
	for i := 3; i < 6; i++ {
		trace[i].Entries = []config.Entry{{Key: "remote_address", Value: "10.0.0.2"}}
	}
	res, err := Run(cfg, trace, Options{Domain: "test", Under: Override(algorithm.SlidingLog)})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Limits[0]
	if l.Keys != 2 || l.Admitted != 6 || l.WorstSecond != 3 || l.WorstWindow != 3 {
		t.Errorf("keys %d, admitted %d, worst second %d, worst window %d; want 2, 6, 3, 3", l.Keys, l.Admitted, l.WorstSecond, l.WorstWindow)
	}
}

// TestRunKnowsTheServersRules: the simulator decides as the server does
// on count_refused (a charge that does not fit still spends the budget),
// share_threshold (one counter for a wildcard's matches) and calendar
// windows (a month turning on the 1st in the zone, not every 30 days).
func TestRunKnowsTheServersRules(t *testing.T) {
	cfg := parseConfig(t, `domain: test
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: fixed_window, count_refused: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: fixed_window}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 1, algorithm: fixed_window, calendar: Europe/Paris}
`)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(time.Second / time.Microsecond)
	t0 := time.Date(2026, 1, 31, 23, 59, 0, 0, paris).UnixMicro()
	req := func(at int64, key, value string, cost int64) Request {
		return Request{Time: at, Entries: []config.Entry{{Key: key, Value: value}}, Cost: cost}
	}
	trace := []Request{
		// A budget charged 300, 5,000 (over: counted with count_refused),
		// then checked.
		req(t0, "tenant", "a", 300), req(t0+sec, "tenant", "a", 5000), req(t0+2*sec, "tenant", "a", 1),
		req(t0, "plain", "a", 300), req(t0+sec, "plain", "a", 5000), req(t0+2*sec, "plain", "a", 1),
		// Three files under one shared counter of 2.
		req(t0, "files", "files/a", 1), req(t0+sec, "files", "files/b", 1), req(t0+2*sec, "files", "files/c", 1),
		// A monthly limit of 1 on Paris's calendar: 31 January, then 1 February.
		req(t0, "monthly", "m", 1), req(t0+30*sec, "monthly", "m", 1), req(t0+90*sec, "monthly", "m", 1),
	}
	res, err := Run(cfg, trace, Options{Domain: "test", Bucket: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int64{}
	for _, l := range res.Limits {
		admitted[l.Path] = l.Admitted
	}
	want := map[string]int64{"test.tenant": 1, "test.plain": 2, "test.files_files/*": 2, "test.monthly": 2}
	for path, n := range want {
		if admitted[path] != n {
			t.Errorf("%s admitted %d; want %d (all: %v)", path, admitted[path], n, admitted)
		}
	}
}

// TestRunConcurrency: with Options.Concurrency each key runs at most that
// many requests at once, each holding its slot for its duration.
func TestRunConcurrency(t *testing.T) {
	cfg := parseConfig(t, `domain: test
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000}
`)
	sec := int64(time.Second / time.Microsecond)
	req := func(at, dur int64) Request {
		return Request{Time: at, Entries: []config.Entry{{Key: "tenant", Value: "a"}}, Duration: dur}
	}
	// Two slots: the third overlapping request is refused; once the first
	// ends at 2 s, the fourth runs.
	trace := []Request{req(0, 2*sec), req(sec/2, 10*sec), req(sec, sec), req(2*sec, sec)}
	res, err := Run(cfg, trace, Options{Domain: "test", Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Limits[0]
	if l.Admitted != 3 || l.ConcurrencyRejected != 1 || l.Rejected != 1 {
		t.Errorf("admitted %d, rejected %d (%d by concurrency); want 3, 1 (1)", l.Admitted, l.Rejected, l.ConcurrencyRejected)
	}
}
