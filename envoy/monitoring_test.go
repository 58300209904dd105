package envoy_test

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// mountOf returns where s mounts src (a path relative to the repository
// root, as "./deploy/..."), or "".
func (s composeService) mountOf(src string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[0] == src {
			return parts[1]
		}
	}
	return ""
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestComposeMonitoring: docker compose up shows the dashboard. Prometheus
// reads the mounted config and scrapes every sluice daemon on its admin
// port; Grafana's datasource is that Prometheus under the uid the
// dashboard names, and its dashboard provider reads the mounted
// dashboards, the home dashboard among them. (e2e checks the dashboard's
// queries against the daemons' live /metrics.)
func TestComposeMonitoring(t *testing.T) {
	root := repoRoot(t)
	c := readCompose(t, root)

	prom, ok := c.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	const promConfig = "./deploy/prometheus/prometheus.yml"
	if at := prom.mountOf(promConfig); at == "" || !slices.Contains(prom.Command, "--config.file="+at) {
		t.Errorf("prometheus: %s mounted at %q, command %q: it must be the --config.file", promConfig, at, prom.Command)
	}
	var pc struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(root, promConfig), &pc)
	scraped := map[string]bool{}
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := splitHostPort(target)
				s, ok := c.Services[host]
				if err != nil || !ok || !s.listens(port) {
					t.Errorf("%s: job %s scrapes %s, which is not a compose service listening there", promConfig, sc.JobName, target)
				}
				scraped[host] = true
			}
		}
	}
	for name, s := range c.Services {
		if s.Image == "sluice:dev" && s.flag("http-addr") != "" && !scraped[name] {
			t.Errorf("%s serves /metrics on %s but Prometheus does not scrape it", name, s.flag("http-addr"))
		}
	}

	graf, ok := c.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service")
	}
	const (
		datasources = "./deploy/grafana/provisioning/datasources"
		providers   = "./deploy/grafana/provisioning/dashboards"
		dashboards  = "./deploy/grafana/dashboards"
	)
	if graf.mountOf(datasources) != "/etc/grafana/provisioning/datasources" || graf.mountOf(providers) != "/etc/grafana/provisioning/dashboards" {
		t.Errorf("grafana: the provisioning directories are not mounted where Grafana reads them: %q", graf.Volumes)
	}
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		}
	}
	readYAML(t, filepath.Join(root, datasources, "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != "prometheus" || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasources: %+v; want one prometheus datasource of uid prometheus (the dashboard's)", ds.Datasources)
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource URL %q: want the prometheus service on 9090", ds.Datasources[0].URL)
	}
	var pv struct {
		Providers []struct {
			Options struct{ Path string }
		}
	}
	readYAML(t, filepath.Join(root, providers, "sluice.yaml"), &pv)
	mounted := graf.mountOf(dashboards)
	if len(pv.Providers) != 1 || mounted == "" || pv.Providers[0].Options.Path != mounted {
		t.Errorf("dashboard provider %+v reads where %s is not mounted (%q)", pv.Providers, dashboards, mounted)
	}
	home := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if rel, ok := strings.CutPrefix(home, mounted+"/"); !ok {
		t.Errorf("home dashboard %q is not under %s", home, mounted)
	} else if _, err := os.Stat(filepath.Join(root, dashboards, rel)); err != nil {
		t.Errorf("home dashboard: %v", err)
	}
}
