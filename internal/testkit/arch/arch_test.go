package arch

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice/"

// pkgInfo is what go list says of one package.
type pkgInfo struct {
	ImportPath string
	Imports    []string // direct, not tests'
	Standard   bool
}

// listPackages returns sluice's packages and everything they import,
// keyed by import path.
func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", module+"...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkgInfo{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// core is what decides without a wire or a store.
var core = []string{"pkg/algorithm", "pkg/config", "pkg/limiter", "pkg/cache", "pkg/breaker", "pkg/localbucket", "pkg/share", "pkg/topkeys", "pkg/lrumap"}

// forbiddenInCore: no gRPC, no protobuf, no Envoy messages, no Redis
// client, transitively.
var forbiddenInCore = []string{"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/envoyproxy/", "github.com/redis/"}

// opaque are libraries whose own dependencies are theirs: the Prometheus
// client encodes its exposition format with protobuf, which the core
// never sees.
var opaque = []string{"github.com/prometheus/"}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// reach returns every package root imports, transitively, without
// looking inside opaque libraries, each mapped to the package that
// imported it (for the error message).
func reach(pkgs map[string]pkgInfo, root string) map[string]string {
	seen := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != root && hasPrefix(p, opaque) {
			continue
		}
		for _, imp := range pkgs[p].Imports {
			if _, ok := seen[imp]; ok {
				continue
			}
			seen[imp] = p
			queue = append(queue, imp)
		}
	}
	return seen
}

// layers: a package may import those of its own layer's list only
// (besides the standard library and third-party code).
var allowed = map[string][]string{
	"pkg/algorithm":   {},
	"pkg/breaker":     {},
	"pkg/localbucket": {},
	"pkg/cache":       {},
	"pkg/flagcache":   {"pkg/cache"}, // pkg/cache's old name, deprecated
	"pkg/lrumap":      {},
	"pkg/peerauth":    {},
	"pkg/share":       {"pkg/lrumap"},
	"pkg/topkeys":     {},
	"pkg/wire":        {},
	"pkg/retry":       {},
	"pkg/config":      {"pkg/algorithm"},
	"pkg/reload":      {"pkg/config", "pkg/algorithm"},
	"pkg/console":     {"pkg/config", "pkg/algorithm", "pkg/reload", "pkg/topkeys"},
	"pkg/global":      {"pkg/algorithm"},
	"pkg/limiter":     {"pkg/algorithm", "pkg/config", "pkg/cache", "pkg/breaker", "pkg/share", "pkg/topkeys"},
	// Envoy's wire: it reaches no store (pkg/server assembles one).
	"pkg/rls": {"pkg/algorithm", "pkg/config", "pkg/limiter", "pkg/peerauth", "pkg/share", "pkg/wire"},
	// Envoy's rate limit quota service: on the core, as pkg/rls is.
	"pkg/rlqs":      {"pkg/algorithm", "pkg/config", "pkg/limiter", "pkg/peerauth"},
	"pkg/server":    {"pkg/algorithm", "pkg/breaker", "pkg/config", "pkg/console", "pkg/cache", "pkg/global", "pkg/limiter", "pkg/peerauth", "pkg/reload", "pkg/rlqs", "pkg/rls", "pkg/share", "pkg/topkeys"},
	"pkg/localtier": {"pkg/algorithm", "pkg/config", "pkg/cache", "pkg/breaker", "pkg/limiter", "pkg/localbucket", "pkg/lrumap", "pkg/rls", "pkg/share", "pkg/console"},
	"pkg/httplimit": {"pkg/algorithm", "pkg/breaker", "pkg/global", "pkg/limiter", "pkg/retry", "pkg/rls", "pkg/server", "pkg/wire"},
}

// TestCoreKnowsNoWire fails when a core package reaches gRPC, protobuf,
// Envoy's messages or the Redis client (ARCHITECTURE.md).
func TestCoreKnowsNoWire(t *testing.T) {
	pkgs := listPackages(t)
	for _, name := range core {
		root := module + name
		if _, ok := pkgs[root]; !ok {
			t.Fatalf("core package %s not found", name)
		}
		for dep, via := range reach(pkgs, root) {
			if hasPrefix(dep, forbiddenInCore) && !hasPrefix(via, forbiddenInCore) {
				t.Errorf("%s reaches %s (imported by %s): the core must not know the wire or a store", name, dep, via)
			}
		}
	}
}

// TestLayers fails when a package under pkg/ imports one its layer does
// not allow, or any of the project's own tooling (internal/, cmd/).
func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	for path, p := range pkgs {
		name, ours := strings.CutPrefix(path, module)
		if !ours || !strings.HasPrefix(name, "pkg/") {
			continue
		}
		ok, known := allowed[name]
		if !known {
			t.Errorf("%s has no place in the layering: add it to ARCHITECTURE.md and this test", name)
			continue
		}
		for _, imp := range p.Imports {
			own, isOwn := strings.CutPrefix(imp, module)
			if !isOwn {
				continue
			}
			if strings.HasPrefix(own, "internal/") || strings.HasPrefix(own, "cmd/") {
				t.Errorf("%s imports %s: pkg/ is what users import, and must not need the project's own tooling", name, own)
				continue
			}
			found := false
			for _, a := range ok {
				found = found || a == own
			}
			if !found {
				t.Errorf("%s imports %s, which its layer does not allow (ARCHITECTURE.md)", name, own)
			}
		}
	}
}
