package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics %s: %s", m.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == RoundTripsMetric {
			return strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metrics %s: no %s (a sluice server on Redis has it)", m.url, RoundTripsMetric)
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux the kernel ABI promises it to programs.
const userHZ = 100

// cpuTime returns the user + system CPU time pid has used, from
// /proc/<pid>/stat (Linux).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after its closing one.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: short /proc stat line", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu of pid %d: bad /proc stat line", pid)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
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
