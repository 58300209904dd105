package loadgen

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// RoundTripsMetric is the counter MetricsURL is read for: sluice's own
// count of Redis round trips (a go-redis hook: one per pipeline or single
// command), which, unlike Redis's INFO, does not count the calls a script
// makes.
const RoundTripsMetric = "sluice_redis_round_trips_total"

// metricsSampler reads one counter from a Prometheus text endpoint.
type metricsSampler struct {
	url    string
	client *http.Client
}

func newMetricsSampler(ctx context.Context, rawURL string, allowRemote bool) (*metricsSampler, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("metrics url %q: want http://host:port/metrics", rawURL)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	if _, err := LoopbackAddr(ctx, host, allowRemote); err != nil {
		return nil, fmt.Errorf("metrics url: %w", err)
	}
	return &metricsSampler{url: rawURL, client: &http.Client{Timeout: 10 * time.Second}}, nil
}

// sample returns the counter's value; an endpoint without it (not a
// sluice server on Redis, a wrong URL) is an error, not zero round trips.
func (m *metricsSampler) sample(ctx context.Context) (float64, error) {
	families, err := m.scrape(ctx)
	if err != nil {
		return 0, err
	}
	if families[RoundTripsMetric] == nil {
		return 0, fmt.Errorf("metrics %s: no %s (a sluice server on Redis has it)", m.url, RoundTripsMetric)
	}
	return counter(families, RoundTripsMetric, "", ""), nil
}

// scrape reads every metric family the endpoint serves.
func (m *metricsSampler) scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: %s", m.url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", m.url, err)
	}
	return families, nil
}

// counter sums family name's counters, those whose label is value when a
// label is given; 0 when the family is absent (a counter vector nothing
// has counted in is not exported).
func counter(families map[string]*dto.MetricFamily, name, label, value string) float64 {
	sum := 0.0
	for _, s := range families[name].GetMetric() {
		if label != "" && !hasLabel(s, label, value) {
			continue
		}
		sum += s.GetCounter().GetValue()
	}
	return sum
}

func hasLabel(s *dto.Metric, name, value string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// cpuTime returns the user + system CPU time pid has used, from
// /proc/<pid>/stat (Linux).
func cpuTime(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return time.Duration(math.Round(st.CPUTime() * float64(time.Second))), nil
}

func cpuTimes(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		var err error
		if out[i], err = cpuTime(pid); err != nil {
			return nil, err
		}
	}
	return out, nil
}
