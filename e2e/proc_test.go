package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/daemon/refenv"
	"github.com/sluicehq/sluice/internal/testkit/gobuild"
)

// binaries are built once per test binary run, by TestMain.
var binaries struct {
	dir string
	err error
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: -short: skipped (the tests build and run the binaries with redis-server; make test runs them)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binaries.dir = dir
	cmd := gobuild.Command(dir+string(filepath.Separator),
		"github.com/sluicehq/sluice/cmd/server", "github.com/sluicehq/sluice/cmd/localfilter")
	if out, err := cmd.CombinedOutput(); err != nil {
		binaries.err = fmt.Errorf("go build: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one sluice process: a server or a sidecar.
type proc struct {
	name       string
	bin        string
	args       []string
	env        []string // when set, the whole environment, and no listen flags
	logPath    string
	GRPC, HTTP string // the addresses it listens on

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startServer starts cmd/server with args (its listeners are added).
func startServer(t *testing.T, name string, args ...string) *proc {
	return start(t, "server", name, args)
}

// startSidecar starts cmd/localfilter with args (its listeners are added).
func startSidecar(t *testing.T, name string, args ...string) *proc {
	return start(t, "localfilter", name, args)
}

func start(t *testing.T, bin, name string, args []string) *proc {
	return startEnv(t, bin, name, nil, args)
}

// startEnv starts bin with only the environment env (nil: this process's)
// and args; with env, nothing is added to args.
func startEnv(t *testing.T, bin, name string, env, args []string) *proc {
	t.Helper()
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	p := &proc{
		name: name, bin: filepath.Join(binaries.dir, bin), args: args, env: env,
		logPath: filepath.Join(t.TempDir(), name+".log"),
	}
	if err := p.launch("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, p.logTail())
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.logTail())
		}
	})
	return p
}

// launch starts the process on the given listen addresses and waits until
// it logs that it listens.
func (p *proc) launch(grpcAddr, httpAddr string) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	offset, _ := logFile.Seek(0, 2)
	args := append([]string{"-grpc-addr", grpcAddr, "-http-addr", httpAddr, "-log-format", "json"}, p.args...)
	if p.env != nil {
		args = p.args // the environment says it all
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Env = p.env
	if p.env == nil {
		cmd.Env = ownEnviron()
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The kernel kills the child if the test binary dies without cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("exited before listening: %v", cmd.ProcessState)
		default:
		}
		if g, h, ok := listening(p.logPath, offset); ok {
			p.GRPC, p.HTTP = g, h
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	return fmt.Errorf("not listening within 30s")
}

// listening reads the addresses from the process's "... listening" log
// line, written after offset.
func listening(path string, offset int64) (grpcAddr, httpAddr string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return "", "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(b[offset:]))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasSuffix(line.Msg, " listening") {
			return line.GRPCAddr, line.HTTPAddr, true
		}
	}
	return "", "", false
}

// stop ends the process as an orchestrator does (SIGTERM, then SIGKILL
// after 15 s) and waits for it.
func (p *proc) stop() {
	cmd, done := p.running()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a frozen process could not act on SIGTERM
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// kill ends the process at once (SIGKILL), as a crash would.
func (p *proc) kill() {
	cmd, done := p.running()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// running returns the process last launched and a channel closed once it
// has exited, or nil if none was.
func (p *proc) running() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// signal sends sig to the process: SIGSTOP freezes it with its
// connections open, SIGCONT resumes it.
func (p *proc) signal(sig syscall.Signal) {
	if cmd, _ := p.running(); cmd != nil {
		cmd.Process.Signal(sig)
	}
}

// restart starts the process again on the addresses it had.
func (p *proc) restart(t *testing.T) {
	t.Helper()
	var err error
	for range 50 { // the port may take a moment to be free again
		if err = p.launch(p.GRPC, p.HTTP); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart %s: %v\n%s", p.name, err, p.logTail())
}

func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// client returns a RateLimitService client on one HTTP/2 connection to p,
// as Envoy's ratelimit cluster holds one.
func (p *proc) client(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// metrics scrapes p's /metrics.
func (p *proc) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTP + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	return mf
}

// get is the status and body of p's admin path.
func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTP + path)
	if err != nil {
		t.Fatalf("%s %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// metric is the sum of the samples of counter or gauge name whose labels
// include the given name=value pairs.
func (p *proc) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return sumMetric(p.metrics(t), name, labels...)
}

func sumMetric(mf map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := mf[name]
	if f == nil {
		return 0
	}
	sum := 0.0
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// writeConfig writes a descriptor config file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	return writeFile(t, t.TempDir(), "limits.yaml", yaml)
}

// writeFile writes text to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// histogramMax is an upper bound of the largest observation of histogram
// name, over all its series: the smallest bucket bound holding every
// observation (+Inf if the largest bucket does not).
func histogramMax(mf map[string]*dto.MetricFamily, name string) float64 {
	f := mf[name]
	if f == nil {
		return 0
	}
	worst := 0.0
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		bound := math.Inf(1)
		for _, b := range h.GetBucket() {
			if b.GetCumulativeCount() == h.GetSampleCount() {
				bound = b.GetUpperBound()
				break
			}
		}
		if h.GetSampleCount() > 0 {
			worst = max(worst, bound)
		}
	}
	return worst
}

// saturate keeps every core busy until the test ends, as a surge of
// traffic would: fault tests must hold on a machine with no CPU to spare
// (a test that passes only on an idle machine has found a bug). The spin
// goroutines are preempted like any other, so the test's own work still
// runs, late.
func saturate(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 1_000_000; i++ {
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// ownEnviron is this process's environment without the variables the
// daemons would read as settings (SLUICE_ ones, envoyproxy/ratelimit's):
// a machine that happens to set REDIS_URL or PORT must not change what a
// test starts.
func ownEnviron() []string {
	ref := map[string]bool{}
	for _, s := range refenv.Settings() {
		ref[s.Var] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if ref[name] || strings.HasPrefix(name, "SLUICE_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
