package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/rlqsenvoy"
	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/global"
)

// TestRLQSFleet: six model Envoys (rate limit quota filter) flood one
// limit of 100 a second for 12 s through two server replicas on one
// Redis, over real gRPC with the servers' tokens; one replica is
// restarted mid-run. Together they admit within 1.05 of an exact limiter
// fed the same requests; the Envoys of the restarted replica come back
// on new streams and are admitted again; the servers recorded what the
// Envoys reported; a caller without a token opens no stream.
func TestRLQSFleet(t *testing.T) {
	servers, redis, ctx := rlqsReplicas(t)

	mem, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exactParams := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 1_000_000, Burst: 100}
	var (
		mu              sync.Mutex
		admitted, exact int
		decided         [2]int    // requests decided before and after the restart
		perEnvoy        [6][2]int // admitted before and after the restart
		restarted       = make(chan struct{})
		wg              sync.WaitGroup
		out             = make([]algorithm.Result, 1)
		start           = time.Now()
		runFor          = 12 * time.Second
		restartAt       = 5 * time.Second
		bucket          = map[string]string{"name": "bucket"}
		exactDecide     = func(now time.Time) bool {
			if err := mem.DecideAt([]algorithm.Item{{Key: "exact", Params: exactParams, Cost: 1}}, out, now.UnixMicro()); err != nil {
				t.Error(err)
			}
			return out[0].Allowed
		}
	)
	// The central cost until the restart: the servers' and Redis's CPU per
	// request the Envoys decided, idle work included.
	cpu := func() time.Duration {
		d := time.Duration(0)
		for _, s := range servers {
			d += time.Duration(s.metric(t, "process_cpu_seconds_total") * float64(time.Second))
		}
		info := redis.Client(t).Info(context.Background(), "cpu").Val()
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if i := strings.Index(info, f); i >= 0 {
				var v float64
				fmt.Sscanf(info[i+len(f):], "%f", &v)
				d += time.Duration(v * float64(time.Second))
			}
		}
		return d
	}
	idle0 := cpu()
	time.Sleep(2 * time.Second)
	idle := (cpu() - idle0) / 2 // a second's, with no Envoy
	start = time.Now()
	for i := range 6 {
		e := rlqsEnvoy(ctx, t, servers[i%2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			phase := 0
			for time.Since(start) < runFor {
				select {
				case <-restarted:
					phase = 1
				default:
				}
				now := time.Now()
				ok := e.Request(bucket, rlqsenvoy.Settings{}, now)
				e.Tick(now)
				mu.Lock()
				decided[phase]++
				if ok {
					admitted++
					perEnvoy[i][phase]++
				}
				if exactDecide(now) {
					exact++
				}
				mu.Unlock()
				time.Sleep(3 * time.Millisecond) // about 300 a second each: 18× the limit
			}
		}()
	}
	cpu0 := cpu()
	time.Sleep(restartAt)
	central := cpu() - cpu0
	mu.Lock()
	perSecond := central / time.Duration(restartAt/time.Second)
	t.Logf("central CPU (two servers and Redis) with no Envoy %v a second; with the six until the restart %v a second, %.2f µs for each of the %d requests they decided",
		idle, perSecond, float64(central.Microseconds())/float64(decided[0]), decided[0])
	mu.Unlock()
	servers[0].kill()
	servers[0].restart(t)
	close(restarted)
	wg.Wait()

	ratio := float64(admitted) / float64(exact)
	t.Logf("admitted %d, exact %d: %.3f; per Envoy before/after the restart %v", admitted, exact, ratio, perEnvoy)
	if ratio > 1.05 {
		t.Errorf("admitted %.3f of exact; want at most 1.05", ratio)
	}
	for i, n := range perEnvoy {
		if n[1] == 0 {
			t.Errorf("envoy %d (server-%d) admitted nothing after the restart", i, i%2+1)
		}
	}
	recorded := 0.0
	for _, s := range servers {
		recorded += s.metric(t, "sluice_rlqs_recorded_requests_total", "result", "ok")
	}
	if recorded == 0 {
		t.Error("the servers recorded none of the Envoys' reports")
	}

	// The admin page shows the streams.
	resp, err := http.Get("http://" + servers[1].HTTP + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "(RLQS)") || !strings.Contains(string(page), "streams open") {
		t.Error("the admin page shows no RLQS section")
	}

	// No token: no stream.
	conn, err := grpc.NewClient(servers[1].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a stream without a token: %v; want PermissionDenied", err)
	}
}

// TestRLQSFleetAtOneAndAHalf: ten model Envoys, dealt round two server
// replicas on one Redis over real gRPC, offered 1.5 times a limit of 100
// a second, requests arriving at random (Poisson), evenly or zipf across
// the Envoys. Past their first periodic reports (6 s: before them no
// demand is known and the shares are equal, which costs a zipf fleet a
// quarter of those seconds, as the model's cold minutes show), over the
// next 10 s they admit at least 0.95 and at most 1.05 of an exact limiter
// fed the same requests from the start, and every Envoy with demand at
// least half its fair share.
func TestRLQSFleetAtOneAndAHalf(t *testing.T) {
	const warm, measured = 6 * time.Second, 10 * time.Second
	for _, dist := range []string{"even", "zipf"} {
		t.Run(dist, func(t *testing.T) {
			t.Parallel()
			servers, _, ctx := rlqsReplicas(t)
			mem, err := global.NewMemory(global.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			const n = 10
			rates, sum := make([]float64, n), 0.0
			for i := range rates {
				rates[i] = 1
				if dist == "zipf" {
					rates[i] = 1 / math.Pow(float64(i+1), 1.1)
				}
				sum += rates[i]
			}
			var (
				mu              sync.Mutex
				admitted, exact int
				asked, got      [n]int
				out             = make([]algorithm.Result, 1)
				exactParams     = algorithm.Params{Kind: algorithm.TokenBucket, Limit: 100, Window: 1_000_000, Burst: 100}
				wg              sync.WaitGroup
				start           = time.Now()
				bucket          = map[string]string{"name": "bucket"}
			)
			for i := range n {
				rates[i] *= 1.5 * 100 / sum
				e := rlqsEnvoy(ctx, t, servers[i%2])
				rng := rand.New(rand.NewPCG(uint64(i), 26))
				wg.Add(1)
				go func() {
					defer wg.Done()
					next := start
					for {
						// The next arrival: an exponential wait after the last one's
						// due time, so that a late wake-up does not thin the load.
						next = next.Add(time.Duration(rng.ExpFloat64() / rates[i] * float64(time.Second)))
						if next.Sub(start) >= warm+measured {
							return
						}
						time.Sleep(time.Until(next))
						now := time.Now()
						ok := e.Request(bucket, rlqsenvoy.Settings{}, now)
						e.Tick(now)
						mu.Lock()
						if err := mem.DecideAt([]algorithm.Item{{Key: "exact", Params: exactParams, Cost: 1}}, out, now.UnixMicro()); err != nil {
							t.Error(err)
						}
						if now.Sub(start) >= warm {
							asked[i]++
							if ok {
								admitted++
								got[i]++
							}
							if out[0].Allowed {
								exact++
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			ratio := float64(admitted) / float64(exact)
			t.Logf("admitted %d, exact %d: %.3f; per Envoy admitted/asked %v / %v", admitted, exact, ratio, got, asked)
			if ratio > 1.05 || ratio < 0.95 {
				t.Errorf("admitted %.3f of exact; want 0.95 to 1.05", ratio)
			}
			all := 0
			for _, a := range asked {
				all += a
			}
			for i := range n {
				fair := min(float64(asked[i]), float64(exact)*float64(asked[i])/float64(all))
				if asked[i] > 0 && float64(got[i]) < fair/2 {
					t.Errorf("envoy %d: admitted %d of %d asked; want at least half its fair share %.0f", i, got[i], asked[i], fair)
				}
			}
		})
	}
}

// rlqsReplicas starts two server replicas on one Redis, serving a limit of
// 100 a second on {name: bucket} in domain quota to the Envoys holding
// one token, and returns them, the Redis, and a context carrying the
// token, cancelled when the test ends.
func rlqsReplicas(t *testing.T) ([]*proc, *redistest.Server, context.Context) {
	t.Helper()
	const yaml = `domain: quota
descriptors:
  - key: name
    value: bucket
    rate_limit: {name: bucket, unit: second, requests_per_unit: 100}
`
	dir := t.TempDir()
	cfg := writeFile(t, dir, "quota.yaml", yaml)
	const token = "e2e-rlqs-token-0123456789abcdef"
	tokens := writeFile(t, dir, "tokens", "envoys "+token+"\n")
	redis := redistest.Start(t)
	var servers []*proc
	for i := range 2 {
		servers = append(servers, startServer(t, fmt.Sprintf("server-%d", i+1), "-config", cfg, "-redis-url", redis.URL(),
			"-sidecar-tokens", tokens, "-sidecar-tokens-plaintext"))
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	return servers, redis, ctx
}

// rlqsEnvoy is a model Envoy of domain quota on its own connection to
// server, its streams opened with ctx.
func rlqsEnvoy(ctx context.Context, t *testing.T, server *proc) *rlqsenvoy.Envoy {
	t.Helper()
	conn, err := grpc.NewClient(server.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var e *rlqsenvoy.Envoy
	e = rlqsenvoy.New("quota", rlqsenvoy.GRPC(ctx, conn, func() *rlqsenvoy.Envoy { return e }, time.Now))
	return e
}
