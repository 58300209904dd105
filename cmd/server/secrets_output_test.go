package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The passwords of TestNoSecretInOutput: unreserved characters only, so
// that a URL shows them as they are. slashed has a "/" a URL's password
// must escape, so its URLs do not parse; wrong is one Redis refuses.
const (
	secretPW = "S3cretPW7f3a"
	slashed  = "Xq7Vb/" + secretPW
	wrongPW  = "WrongPW9c1e"
)

// TestNoSecretInOutput starts the built daemons with a Redis password in
// every form they accept — -redis-url with user:password or :password,
// SLUICE_REDIS_URL, -redis-password and SLUICE_REDIS_PASSWORD for Cluster
// and Sentinel, -redis-sentinel-password, the reference's REDIS_URL (an
// address or a redis:// URL, with the password in it or in the query)
// with REDIS_AUTH as user:password and as password, REDIS_SENTINEL_AUTH —
// and in malformed ones that stop start-up, with -pprof and debug logs,
// and looks for the password in everything they print and serve on the
// admin listener. The findings: a malformed REDIS_URL with REDIS_AUTH
// printed the password in the start-up error, and /debug/pprof/cmdline
// served -redis-url's.
func TestNoSecretInOutput(t *testing.T) {
	bin := buildDaemons(t)
	aclUser := redistest.WithArgs("--user", "app", "on", ">"+secretPW, "~*", "&*", "+@all")
	rdb := redistest.Start(t, redistest.WithPassword(secretPW), aclUser)
	cluster := redistest.StartCluster(t, 3)
	sentinel := redistest.StartSentinel(t)
	cfg := writeConfig(t, testConfig)
	clusterAddrs := strings.Join(cluster.Addrs, ",")

	type form struct {
		name    string
		env     []string
		args    []string
		starts  bool
		decides bool     // on Redis: the password reached it
		secrets []string // default: secretPW
	}
	forms := []form{
		{name: "-redis-url user:password", args: []string{"-redis-url", "redis://app:" + secretPW + "@" + rdb.Addr}, starts: true, decides: true},
		{name: "-redis-url :password", args: []string{"-redis-url", "redis://:" + secretPW + "@" + rdb.Addr + "/0"}, starts: true, decides: true},
		{name: "-redis-url wrong password", args: []string{"-redis-url", "redis://app:" + wrongPW + "@" + rdb.Addr}, starts: true, secrets: []string{wrongPW}},
		{name: "SLUICE_REDIS_URL", env: []string{"SLUICE_REDIS_URL=redis://app:" + secretPW + "@" + rdb.Addr}, starts: true, decides: true},
		{name: "-redis-password cluster", args: []string{"-redis-cluster", clusterAddrs, "-redis-username", "app", "-redis-password", secretPW}, starts: true},
		{name: "SLUICE_REDIS_PASSWORD sentinel", env: []string{"SLUICE_REDIS_PASSWORD=" + secretPW},
			args: []string{"-redis-sentinel-addrs", sentinel.Addr, "-redis-sentinel-master", sentinel.MasterName}, starts: true},
		{name: "-redis-sentinel-password", args: []string{"-redis-sentinel-addrs", sentinel.Addr, "-redis-sentinel-master", sentinel.MasterName,
			"-redis-sentinel-username", "app", "-redis-sentinel-password", secretPW}, starts: true},
		{name: "REDIS_AUTH user:password", env: []string{"REDIS_URL=" + rdb.Addr, "REDIS_AUTH=app:" + secretPW}, starts: true, decides: true},
		{name: "REDIS_AUTH password", env: []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr, "REDIS_AUTH=" + secretPW}, starts: true, decides: true},
		// The finding's: a redis:// URL in REDIS_URL, which the reference's
		// client reads, REDIS_AUTH winning.
		{name: "REDIS_URL redis:// with REDIS_AUTH", env: []string{"REDIS_URL=redis://" + rdb.Addr, "REDIS_AUTH=admin:" + secretPW}, starts: true},
		{name: "REDIS_URL with user:password", env: []string{"REDIS_URL=redis://app:" + secretPW + "@" + rdb.Addr}, starts: true, decides: true},
		{name: "REDIS_URL with ?password", env: []string{"REDIS_URL=redis://" + rdb.Addr + "?username=app&password=" + secretPW}, starts: true, decides: true},
		{name: "REDIS_AUTH cluster", env: []string{"REDIS_TYPE=CLUSTER", "REDIS_URL=" + clusterAddrs, "REDIS_AUTH=app:" + secretPW}, starts: true},
		{name: "REDIS_AUTH and REDIS_SENTINEL_AUTH", env: []string{"REDIS_TYPE=SENTINEL", "REDIS_URL=" + sentinel.MasterName + "," + sentinel.Addr,
			"REDIS_AUTH=" + secretPW, "REDIS_SENTINEL_AUTH=app:" + secretPW}, starts: true},
		{name: "sentinel URL with a password", env: []string{"REDIS_TYPE=SENTINEL", "REDIS_URL=" + sentinel.MasterName + ",redis://:" + secretPW + "@" + sentinel.Addr}, starts: true},

		// Malformed: start-up stops, and says why without the password.
		{name: "-redis-url with an unescaped /", args: []string{"-redis-url", "redis://app:" + slashed + "@" + rdb.Addr}, secrets: []string{"Xq7Vb", secretPW}},
		{name: "-redis-url with a bad port", args: []string{"-redis-url", "redis://app:" + secretPW + "@127.0.0.1:notaport"}},
		{name: "-redis-url with a bad database", args: []string{"-redis-url", "redis://app:" + secretPW + "@" + rdb.Addr + "/notadb"}},
		{name: "-redis-url with ?password", args: []string{"-redis-url", "redis://" + rdb.Addr + "?password=" + secretPW}},
		{name: "SLUICE_REDIS_URL with a bad database", env: []string{"SLUICE_REDIS_URL=redis://app:" + secretPW + "@" + rdb.Addr + "/x"}},
		{name: "-redis-url and -redis-cluster", args: []string{"-redis-url", "redis://app:" + secretPW + "@" + rdb.Addr, "-redis-cluster", clusterAddrs}},
		{name: "a URL for a number", env: []string{"SLUICE_REDIS_POOL_SIZE=redis://app:" + secretPW + "@" + rdb.Addr}},
		{name: "a URL for a number flag", args: []string{"-redis-pool-size", "redis://app:" + secretPW + "@" + rdb.Addr}},
		// An unquoted password with a space: its second word is an argument.
		{name: "a password in two words", args: []string{"-redis-sentinel-addrs", sentinel.Addr, "-redis-sentinel-master", sentinel.MasterName,
			"-redis-password", "My", secretPW}},
		{name: "REDIS_URL with an unescaped /", env: []string{"REDIS_URL=redis://app:" + slashed + "@" + rdb.Addr}, secrets: []string{"Xq7Vb", secretPW}},
		{name: "REDIS_URL a rediss:// URL", env: []string{"REDIS_URL=rediss://app:" + secretPW + "@" + rdb.Addr}},
		{name: "REDIS_URL not a sentinel list", env: []string{"REDIS_TYPE=SENTINEL", "REDIS_URL=redis://app:" + secretPW + "@" + sentinel.Addr}},
		{name: "REDIS_URL a bad database", env: []string{"REDIS_URL=redis://" + rdb.Addr + "/x", "REDIS_AUTH=app:" + secretPW}},
		{name: "REDIS_AUTH with a refused setting", env: []string{"REDIS_URL=" + rdb.Addr, "REDIS_AUTH=" + secretPW, "REDIS_TLS=true",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=authorization=Bearer " + secretPW}},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-config", cfg, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
				"-log-format", "json", "-log-level", "debug", "-pprof", "-store-timeout", "1s"}, f.args...)
			d := runDaemon(t, filepath.Join(bin, "server"), f.env, args...)
			served := ""
			if d.grpcAddr == "" {
				if f.starts {
					t.Errorf("the server did not start:\n%s", d.out)
				} else if code, _ := d.exited(time.Second); code == 0 {
					t.Errorf("the server exited with 0; want a start-up error")
				}
			} else {
				if !f.starts {
					t.Errorf("the server started; want a start-up error")
				}
				var err error
				served, err = useAndRead(t, d)
				if f.decides && err != nil {
					t.Errorf("a decision on Redis: %v\n%s", err, d.out)
				}
			}
			d.stop()
			secrets := f.secrets
			if secrets == nil {
				secrets = []string{secretPW}
			}
			for _, s := range secrets {
				if where := holds(d.out.String(), served, s); where != "" {
					t.Errorf("the server shows the password:\n%s", where)
				}
			}
		})
	}

	// The sidecar, given the reference's Redis settings it has no use for,
	// warns and shows none of them.
	t.Run("localfilter", func(t *testing.T) {
		t.Parallel()
		d := runDaemon(t, filepath.Join(bin, "localfilter"),
			[]string{"REDIS_URL=" + rdb.Addr, "REDIS_AUTH=app:" + secretPW, "REDIS_SENTINEL_AUTH=" + secretPW, "SLUICE_REDIS_URL=redis://app:" + secretPW + "@" + rdb.Addr},
			"-config", cfg, "-upstream", "127.0.0.1:1", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
			"-log-format", "json", "-log-level", "debug", "-pprof")
		if d.grpcAddr == "" {
			t.Fatalf("the sidecar did not start:\n%s", d.out)
		}
		served, _ := useAndRead(t, d)
		d.stop()
		if where := holds(d.out.String(), served, secretPW); where != "" {
			t.Errorf("the sidecar shows the password:\n%s", where)
		}
		if !strings.Contains(d.out.String(), `"variable":"REDIS_AUTH"`) {
			t.Errorf("the sidecar did not warn that it ignores REDIS_AUTH:\n%s", d.out)
		}
	})
}

// useAndRead makes the daemon decide (so that it reaches Redis), and
// returns all its admin listener serves: its pages, metrics, profiles
// (-pprof) and /json's answer; and the decision's error.
func useAndRead(t *testing.T, d *daemon) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, decided := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("secret"))
	var all strings.Builder
	base := "http://" + d.httpAddr
	client := &http.Client{Timeout: 10 * time.Second}
	read := func(resp *http.Response, err error) {
		if err != nil {
			t.Errorf("admin listener: %v", err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&all, "%s %s → %d\n%s\n", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, b)
	}
	for _, path := range []string{"/", "/console.js", "/config", "/readyz", "/healthz", "/healthcheck", "/metrics", "/debug/top",
		"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap?debug=1"} {
		read(client.Get(base + path))
	}
	read(client.Post(base+"/json", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`)))
	return all.String(), decided
}

// holds says where secret shows, in printed (stdout and stderr) or served
// (the admin listener): the first lines that hold it; "" when nowhere.
func holds(printed, served, secret string) string {
	var out []string
	for _, place := range []struct{ name, text string }{{"its output", printed}, {"its admin listener", served}} {
		n := 0
		for _, line := range strings.Split(place.text, "\n") {
			if strings.Contains(line, secret) {
				if n++; n <= 3 {
					out = append(out, place.name+": "+line)
				}
			}
		}
		if n > 3 {
			out = append(out, fmt.Sprintf("%s: %d more lines", place.name, n-3))
		}
	}
	return strings.Join(out, "\n")
}

// TestNoTokenInOutput: the sidecars' tokens — the server's token file, a
// sidecar's own, a wrong one the server refuses and the lines of a
// malformed file that stops start-up — show nowhere in what the server
// and the sidecars print and serve, with debug logs and -pprof, after
// records were sent, honoured and refused.
func TestNoTokenInOutput(t *testing.T) {
	bin := buildDaemons(t)
	cfg := writeConfig(t, testConfig)
	dir := t.TempDir()
	const (
		goodTok  = "GoodTok8d2e0c1a9b7f6e5d4c3b2a1f0e9d"
		wrongTok = "WrongTok3a4b5c6d7e8f9a0b1c2d3e4f5a6b"
		shortTok = "Short7q9"
		extraTok = "ExtraTok0f1e2d3c4b5a69788796a5b4c3d2"
	)
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens := file("tokens", "sidecar-a "+goodTok+"\n")
	common := []string{"-log-format", "json", "-log-level", "debug", "-pprof", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}
	server := runDaemon(t, filepath.Join(bin, "server"), nil, append([]string{"-config", cfg, "-sidecar-tokens", tokens, "-sidecar-tokens-plaintext"}, common...)...)
	if server.grpcAddr == "" {
		t.Fatalf("the server did not start:\n%s", server.out)
	}
	var sidecars []*daemon
	for name, tok := range map[string]string{"good": goodTok, "wrong": wrongTok} {
		d := runDaemon(t, filepath.Join(bin, "localfilter"), nil, append([]string{"-config", cfg, "-upstream", server.grpcAddr, "-mode", "async",
			"-upstream-token-file", file(name+".token", tok+"\n"), "-upstream-token-plaintext"}, common...)...)
		if d.grpcAddr == "" {
			t.Fatalf("the %s sidecar did not start:\n%s", name, d.out)
		}
		sidecars = append(sidecars, d)
	}
	var served strings.Builder
	for _, d := range sidecars {
		s, err := useAndRead(t, d)
		if err != nil {
			t.Errorf("a decision at a sidecar: %v", err)
		}
		served.WriteString(s)
	}
	time.Sleep(500 * time.Millisecond) // the records flushed, honoured and refused
	s, _ := useAndRead(t, server)
	served.WriteString(s)
	for _, d := range sidecars {
		s, _ := useAndRead(t, d)
		served.WriteString(s)
	}
	// A malformed token file stops start-up, naming the line, not the token.
	bad := runDaemon(t, filepath.Join(bin, "server"), nil, append([]string{"-config", cfg,
		"-sidecar-tokens", file("bad-tokens", "sidecar-a "+shortTok+"\nsidecar-b "+extraTok+" more\n"), "-sidecar-tokens-plaintext"}, common...)...)
	if bad.grpcAddr != "" {
		t.Errorf("the server started on a malformed token file")
	}
	printed := server.out.String() + sidecars[0].out.String() + sidecars[1].out.String() + bad.out.String()
	for _, d := range append(sidecars, server, bad) {
		d.stop()
	}
	if !strings.Contains(printed, "bad_token") {
		t.Errorf("no refusal of the wrong token was logged; the test saw no refused record:\n%s", printed)
	}
	for _, tok := range []string{goodTok, wrongTok, shortTok, extraTok} {
		if where := holds(printed, served.String(), tok); where != "" {
			t.Errorf("a token shows:\n%s", where)
		}
	}
}
