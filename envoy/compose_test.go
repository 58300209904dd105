package envoy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The parts of docker-compose.yml the checks read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// flag returns the value after -name in the service's command, or "".
func (s composeService) flag(name string) string {
	if i := slices.Index(s.Command, "-"+name); i >= 0 && i+1 < len(s.Command) {
		return s.Command[i+1]
	}
	return ""
}

// listens reports whether one of the service's -…addr flags names port. The binaries' default
// addresses do not count: the compose file spells out every address it relies on.
func (s composeService) listens(port string) bool {
	for i, arg := range s.Command {
		if strings.HasPrefix(arg, "-") && strings.HasSuffix(arg, "addr") && i+1 < len(s.Command) {
			if _, p, err := splitHostPort(s.Command[i+1]); err == nil && p == port {
				return true
			}
		}
	}
	return false
}

func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", strconv.ErrSyntax
	}
	return s[:i], s[i+1:], nil
}

// dockerfile is what the checks read from the Dockerfile.
type dockerfile struct {
	stages   []string // FROM images, in order
	packages []string // ./cmd/... packages built
	buildRun string   // the RUN line that builds them, continuations joined
	binaries []string // files copied from the build stage into the final image, as /name
	copies   []string // other COPY lines of the final stage
	user     string
}

func readDockerfile(t *testing.T, root string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	var lines []string
	var cont string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	for _, l := range lines {
		f := strings.Fields(l)
		switch strings.ToUpper(f[0]) {
		case "FROM":
			d.stages = append(d.stages, f[1])
		case "RUN":
			if strings.Contains(l, "go build") {
				d.buildRun = l
				for _, w := range f {
					if strings.HasPrefix(w, "./cmd/") {
						d.packages = append(d.packages, w)
					}
				}
			}
		case "COPY":
			if len(d.stages) < 2 {
				continue
			}
			if strings.HasPrefix(f[1], "--from=") {
				srcs, dst := f[2:len(f)-1], f[len(f)-1]
				for _, s := range srcs {
					d.binaries = append(d.binaries, filepath.Join(dst, filepath.Base(s)))
				}
				continue
			}
			d.copies = append(d.copies, strings.Join(f[1:], " "))
		case "USER":
			d.user = f[1]
		}
	}
	return d
}

func readCompose(t *testing.T, root string) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}

// TestComposeConfig runs Compose's own validation of the file. No Docker engine is needed for
// `config`.
func TestComposeConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs docker-compose (make test installs and runs it)")
	}
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose not found (%v): run ./scripts/install-test-deps.sh, which installs Debian's docker-compose", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose -f docker-compose.yml config -q: %v\n%s", err, indent(string(out)))
	}
}

// TestDockerfile: the image is built the way the project builds binaries, from packages that
// exist, and ships exactly what it builds.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	d := readDockerfile(t, root)

	if len(d.stages) != 2 {
		t.Fatalf("Dockerfile has stages %q; want a builder and a final stage", d.stages)
	}
	if want := "golang:" + goMinor(t, root); !strings.HasPrefix(d.stages[0], want+" ") && d.stages[0] != want {
		t.Errorf("builder FROM %s; want %s, the Go of go.mod", d.stages[0], want)
	}
	if want := "gcr.io/distroless/static-debian12:nonroot"; d.stages[1] != want {
		t.Errorf("final FROM %s; want %s", d.stages[1], want)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-tags vtprotobuf", "-trimpath", `-ldflags="-s -w"`} {
		if !strings.Contains(d.buildRun, want) {
			t.Errorf("the go build line lacks %s: %q", want, d.buildRun)
		}
	}
	wantPkgs := []string{"./cmd/server", "./cmd/localfilter", "./cmd/demo-upstream", "./cmd/healthcheck"}
	for _, p := range wantPkgs {
		if !slices.Contains(d.packages, p) {
			t.Errorf("Dockerfile does not build %s", p)
		}
	}
	for _, p := range d.packages {
		if !isMainPackage(t, filepath.Join(root, p)) {
			t.Errorf("Dockerfile builds %s, which is not a main package in this repository", p)
		}
		if !slices.Contains(d.binaries, "/"+filepath.Base(p)) {
			t.Errorf("Dockerfile builds %s but does not copy /%s into the final image", p, filepath.Base(p))
		}
	}
	for _, b := range d.binaries {
		if !slices.Contains(d.packages, "./cmd"+b) {
			t.Errorf("Dockerfile copies %s, which no go build line produces", b)
		}
	}
	if !slices.Contains(d.copies, "envoy/ratelimit-config/ /etc/sluice/config/") {
		t.Errorf("final stage copies %q; want envoy/ratelimit-config/ into /etc/sluice/config/", d.copies)
	}
	if d.user == "" || strings.HasPrefix(d.user, "root") || strings.HasPrefix(d.user, "0") {
		t.Errorf("USER %q; want the image's non-root user", d.user)
	}

	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Fields(string(ignore))
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore should exclude .git")
	}
	for _, needed := range []string{"go.mod", "go.sum", "cmd", "pkg", "envoy", "envoy/ratelimit-config", "internal"} {
		if slices.Contains(patterns, needed) || slices.Contains(patterns, needed+"/") {
			t.Errorf(".dockerignore excludes %s, which the build needs", needed)
		}
	}
}

// goMinor returns "1.26" from go.mod's go directive.
func goMinor(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// isMainPackage reports whether dir holds a non-test Go file of package main.
func isMainPackage(t *testing.T, dir string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^package main\b`).Match(data) {
			return true
		}
	}
	return false
}

// TestComposeWiring: every name, port, path and binary the compose file mentions exists, in
// the compose file itself, the Dockerfile's image, the repository, or the Envoy bootstrap it
// mounts.
func TestComposeWiring(t *testing.T) {
	root := repoRoot(t)
	c := readCompose(t, root)
	d := readDockerfile(t, root)
	const ourImage = "sluice:dev"

	for name, s := range c.Services {
		for dep, cond := range s.DependsOn {
			target, ok := c.Services[dep]
			if !ok {
				t.Errorf("%s depends on %q, which is not a service", name, dep)
				continue
			}
			if cond.Condition == "service_healthy" && target.Healthcheck == nil {
				t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}

		ours := s.Image == ourImage
		if ours != (s.Build != nil) {
			t.Errorf("%s: image %q with build %v; the services built from the Dockerfile are tagged %s", name, s.Image, s.Build, ourImage)
		}
		if !ours {
			if !regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+$`).MatchString(s.Image) || strings.HasSuffix(s.Image, ":latest") {
				t.Errorf("%s: image %q is not pinned to a tag", name, s.Image)
			}
		}
		if ours {
			if len(s.Entrypoint) != 1 || !slices.Contains(d.binaries, s.Entrypoint[0]) {
				t.Errorf("%s: entrypoint %q is not one of the image's binaries %q", name, s.Entrypoint, d.binaries)
			}
			if cfg := s.flag("config"); cfg != "" {
				if !slices.Contains(s.Volumes, "./envoy/ratelimit-config:"+cfg+":ro") {
					t.Errorf("%s: -config %s, but ./envoy/ratelimit-config is not mounted there read-only (edits would not reload)", name, cfg)
				}
			}
		}
		if hc := s.Healthcheck; hc != nil && ours {
			if len(hc.Test) != 3 || hc.Test[0] != "CMD" || hc.Test[1] != "/healthcheck" {
				t.Errorf("%s: healthcheck %q; the image has no shell: want [CMD /healthcheck URL]", name, hc.Test)
			} else if u := hc.Test[2]; !strings.HasPrefix(u, "http://127.0.0.1:") {
				t.Errorf("%s: healthcheck URL %q; want http://127.0.0.1:PORT/...", name, u)
			} else if port, _, _ := strings.Cut(strings.TrimPrefix(u, "http://127.0.0.1:"), "/"); !s.listens(port) {
				t.Errorf("%s: healthcheck probes port %s, where the service does not listen", name, port)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, "./") {
				continue // a named volume
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("%s: mounts %s: %v", name, src, err)
			}
		}
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			container := parts[len(parts)-1]
			if ours && !s.listens(container) {
				t.Errorf("%s: publishes container port %s, where the service does not listen", name, container)
			}
		}
		if up := s.flag("upstream"); up != "" {
			for _, addr := range strings.Split(up, ",") {
				host, port, err := splitHostPort(addr)
				if err != nil || c.Services[host].Image == "" || !c.Services[host].listens(port) {
					t.Errorf("%s: -upstream %s is not a service listening on that port", name, addr)
				}
			}
		}
	}

	// Envoy: it mounts a bootstrap from envoy/ whose clusters are compose services on the ports
	// they listen on, and publishes the bootstrap's listener.
	envoy, ok := c.Services["envoy"]
	if !ok {
		t.Fatal("no envoy service")
	}
	if !regexp.MustCompile(`^envoyproxy/envoy:v1\.(\d+)\.\d+$`).MatchString(envoy.Image) {
		t.Errorf("envoy image %q: want envoyproxy/envoy:v1.MINOR.PATCH", envoy.Image)
	} else if minor, _ := strconv.Atoi(regexp.MustCompile(`v1\.(\d+)`).FindStringSubmatch(envoy.Image)[1]); minor < 33 {
		t.Errorf("envoy image %q: the bootstraps need >= 1.33 (RateLimitPerRoute.rate_limits with hits_addend)", envoy.Image)
	}
	var mounted string
	for _, v := range envoy.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasPrefix(dst, "/etc/envoy/envoy.yaml") {
			mounted = filepath.Base(src)
		}
	}
	if mounted == "" {
		t.Fatal("envoy does not mount a bootstrap at /etc/envoy/envoy.yaml")
	}
	b := bootstrap(t, loadBootstraps(t), mounted)
	for _, cl := range b.GetStaticResources().GetClusters() {
		for _, le := range cl.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				host, port := sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))
				s, ok := c.Services[host]
				if !ok {
					t.Errorf("%s: cluster %q endpoint %s:%s is not a compose service", mounted, cl.GetName(), host, port)
				} else if !s.listens(port) {
					t.Errorf("%s: cluster %q endpoint %s:%s: %s does not listen on %s", mounted, cl.GetName(), host, port, host, port)
				}
				if _, ok := envoy.DependsOn[host]; !ok {
					t.Errorf("envoy does not depend on %s, which its cluster %q sends to", host, cl.GetName())
				}
			}
		}
	}
	var listenerPorts []string
	for _, l := range b.GetStaticResources().GetListeners() {
		listenerPorts = append(listenerPorts, strconv.Itoa(int(l.GetAddress().GetSocketAddress().GetPortValue())))
	}
	for _, p := range envoy.Ports {
		parts := strings.Split(p, ":")
		if !slices.Contains(listenerPorts, parts[len(parts)-1]) {
			t.Errorf("envoy publishes %s, but %s listens on %q", p, mounted, listenerPorts)
		}
	}
}

// TestComposeSidecarsKnown: the servers honour the sidecar's recorded hits only from sidecars
// they know, so the sidecar sends a token that the file of every server it names holds.
func TestComposeSidecarsKnown(t *testing.T) {
	root := repoRoot(t)
	c := readCompose(t, root)
	mounted := func(s composeService, path string) string {
		for _, v := range s.Volumes {
			if src, dst, _ := strings.Cut(v, ":"); strings.TrimSuffix(dst, ":ro") == path {
				return filepath.Join(root, src)
			}
		}
		t.Fatalf("%s is not mounted from the repository", path)
		return ""
	}
	sidecars := 0
	for name, s := range c.Services {
		up := s.flag("upstream")
		if up == "" {
			continue
		}
		sidecars++
		tokenFile := s.flag("upstream-token-file")
		if tokenFile == "" {
			t.Errorf("%s: no -upstream-token-file: the servers would decide its recorded hits as a client's", name)
			continue
		}
		token, err := os.ReadFile(mounted(s, tokenFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range strings.Split(up, ",") {
			host, _, _ := splitHostPort(addr)
			server := c.Services[host]
			tokens, err := os.ReadFile(mounted(server, server.flag("sidecar-tokens")))
			if err != nil {
				t.Fatal(err)
			}
			known := false
			for _, line := range strings.Split(string(tokens), "\n") {
				if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(f[0], "#") && f[1] == strings.TrimSpace(string(token)) {
					known = true
				}
			}
			if !known {
				t.Errorf("%s's token is not in %s's -sidecar-tokens", name, host)
			}
		}
	}
	if sidecars == 0 {
		t.Error("no sidecar in the compose file")
	}
}

// TestComposeFlags builds the binaries the image ships and checks that every flag the compose
// file passes them is one they define, so a renamed flag breaks this test rather than the
// demo's containers.
func TestComposeFlags(t *testing.T) {
	root := repoRoot(t)
	c := readCompose(t, root)
	d := readDockerfile(t, root)
	out := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", append([]string{"build", "-o", out + string(filepath.Separator)}, d.packages...)...)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(d.packages, " "), err, indent(string(msg)))
	}

	defined := map[string][]string{} // binary → flags from its -h
	flagLine := regexp.MustCompile(`(?m)^\s+--?([A-Za-z0-9][A-Za-z0-9_.-]*)`)
	for name, s := range c.Services {
		if len(s.Entrypoint) != 1 || s.Image != "sluice:dev" {
			continue
		}
		bin := s.Entrypoint[0]
		if _, ok := defined[bin]; !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			help, _ := exec.CommandContext(ctx, filepath.Join(out, filepath.Base(bin)), "-h").CombinedOutput()
			cancel()
			for _, m := range flagLine.FindAllStringSubmatch(string(help), -1) {
				defined[bin] = append(defined[bin], m[1])
			}
			if len(defined[bin]) == 0 {
				t.Errorf("%s -h listed no flags:\n%s", bin, indent(string(help)))
			}
		}
		for _, arg := range s.Command {
			if !strings.HasPrefix(arg, "-") {
				continue
			}
			flag, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !slices.Contains(defined[bin], flag) {
				t.Errorf("%s: %s has no flag %s (it has %q)", name, bin, arg, defined[bin])
			}
		}
	}
}
