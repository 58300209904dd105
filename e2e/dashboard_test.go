package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
)

// dashboard is the part of a Grafana dashboard the check reads.
type dashboard struct {
	UID        string
	Templating struct {
		List []struct {
			Name       string
			Datasource struct{ UID string }
			Query      struct{ Query string }
		}
	}
	Panels []dashPanel
}

type dashPanel struct {
	ID         int
	Type       string
	Title      string
	Datasource struct{ UID string }
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string
		RefID      string
		Datasource struct{ UID string }
	}
	Panels []dashPanel // a collapsed row's
}

// grafanaVars replaces the dashboard's variables by values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h", "$instance", ".*")

// TestDashboardQueriesLiveMetrics: deploy/grafana/dashboards/sluice.json
// parses, every panel queries the provisioned Prometheus with PromQL that
// parses, and every metric a query names is one the daemons export,
// checked against the live /metrics of a server on Redis and an async
// sidecar after traffic (admitted, refused, refused from the flag cache,
// refused in shadow mode).
func TestDashboardQueriesLiveMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "dashboards", "sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("sluice.json: %v", err)
	}

	tr := startTier(t, adminYAML, 1, "async")
	server, sidecar := tr.server, tr.fronts[0]
	for _, c := range []struct {
		p    *proc
		name string
	}{{server, "server"}, {sidecar, "sidecar"}} {
		cl := c.p.client(t)
		for i := range 20 {
			ask(t, cl, "remote_address", "10.0.0."+strconv.Itoa(i))
			ask(t, cl, "generic_key", "demo")
			ask(t, cl, "user", "mallory")
		}
	}
	live := map[string]bool{}
	for _, p := range []*proc{server, sidecar} {
		for name, f := range p.metrics(t) {
			live[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				live[name+"_bucket"], live[name+"_sum"], live[name+"_count"] = true, true, true
			}
		}
	}

	used := map[string]bool{}
	check := func(where, expr string) {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			return
		}
		n := 0
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				n++
				used[vs.Name] = true
				if !live[vs.Name] {
					t.Errorf("%s: %q names %s, which neither daemon exports", where, expr, vs.Name)
				}
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+), *\w+\)$`)
	for _, v := range d.Templating.List {
		m := labelValues.FindStringSubmatch(v.Query.Query)
		if m == nil || !live[m[1]] || v.Datasource.UID != "prometheus" {
			t.Errorf("variable %s: query %q on %q", v.Name, v.Query.Query, v.Datasource.UID)
		}
	}
	var panels []dashPanel
	for _, p := range d.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...)
	}
	ids := map[int]bool{}
	for _, p := range panels {
		where := "panel " + strconv.Quote(p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id %d used twice", where, p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: grid position %+v outside Grafana's 24 columns", where, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("%s: datasource %q, %d queries; want queries on the provisioned prometheus", where, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource.UID != "prometheus" || q.RefID == "" {
				t.Errorf("%s: query %s on datasource %q", where, q.RefID, q.Datasource.UID)
			}
			check(where, q.Expr)
		}
	}
	// What operators asked to see is on it.
	for _, m := range []string{
		"sluice_requests_total", "sluice_decisions_total", "sluice_store_duration_seconds_bucket", "sluice_store_errors_total",
		"sluice_store_up", "sluice_localfilter_upstream_up", "sluice_flag_cache_hits_total", "sluice_tier_decisions_total",
		"sluice_localfilter_flush_lag_seconds_bucket", "sluice_localfilter_pending_keys", "sluice_config_reloads_total",
	} {
		if !used[m] {
			t.Errorf("no panel reads %s", m)
		}
	}
	var unused []string
	for _, p := range []*proc{server, sidecar} {
		for name := range p.metrics(t) {
			read := used[name] || used[name+"_bucket"] || used[name+"_sum"] || used[name+"_count"]
			if strings.HasPrefix(name, "sluice_") && !read && !slices.Contains(unused, name) {
				unused = append(unused, name)
			}
		}
	}
	slices.Sort(unused)
	t.Logf("%d panels; sluice metrics no panel reads: %v", len(panels), unused)
}
