//go:build soak

package e2e

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The exactness matrix: every deployment (exact_test.go), every
// algorithm, three traffic shapes, one or three servers, each cell run
// several times. It takes long: `make soak` runs it.
//
//	go test -tags soak -run TestExactMatrix -timeout 4h ./e2e -v \
//	  -matrix.modes "none sync async cached" -matrix.runs 3
var (
	matrixModes    = flag.String("matrix.modes", "none sync async cached", "deployments: none (clients on the servers), sync, async (three sidecars), cached (servers in -redis-mode cached)")
	matrixAlgs     = flag.String("matrix.algorithms", "token_bucket fixed_window sliding_window gcra sliding_log", "algorithms")
	matrixPatterns = flag.String("matrix.patterns", "flood 1.5x 80/10/10", "traffic: a closed-loop flood, an offered 1.5× the limits, a flood split 80/10/10 over the fronts")
	matrixServers  = flag.String("matrix.servers", "1 3", "servers behind each front")
	matrixRuns     = flag.Int("matrix.runs", 3, "runs of each cell")
	matrixDuration = flag.Duration("matrix.duration", 5*time.Second, "each run's load")
	matrixOut      = flag.String("matrix.out", "", "append each run's row to this file (markdown)")
	matrixFlush    = flag.Duration("matrix.flush", 0, "the sidecars' and cached servers' -flush-interval; 0: their default")
	matrixTier     = flag.String("matrix.tier", "", "more flags for the sidecars and cached servers, space-separated (e.g. \"-loose-hold 0\")")
	matrixTrace    = flag.Bool("matrix.trace", false, "log each run's admissions and the exact limiter's by 100 ms of send time")
	matrixServer   = flag.String("matrix.server", "", "more flags for the servers, space-separated (e.g. \"-redis-record-linger 2ms\")")
)

func TestExactMatrix(t *testing.T) {
	out := os.Stdout
	if *matrixOut != "" {
		f, err := os.OpenFile(*matrixOut, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = f
	}
	fmt.Fprintln(out, matrixHeader)
	for _, mode := range strings.Fields(*matrixModes) {
		for _, alg := range strings.Fields(*matrixAlgs) {
			for _, pattern := range strings.Fields(*matrixPatterns) {
				for _, ns := range strings.Fields(*matrixServers) {
					servers, _ := strconv.Atoi(ns)
					for run := range *matrixRuns {
						name := fmt.Sprintf("%s/%s/%s/%d/%d", mode, alg, strings.ReplaceAll(pattern, "/", "-"), servers, run+1)
						t.Run(name, func(t *testing.T) {
							r := matrixCell{mode: mode, alg: alg, pattern: pattern, servers: servers, flush: *matrixFlush, tier: strings.Fields(*matrixTier), server: strings.Fields(*matrixServer), trace: *matrixTrace}.run(t, *matrixDuration)
							fmt.Fprintln(out, r)
							if err := r.check(0); err != nil {
								t.Errorf("%s: %v", name, err)
							}
						})
					}
				}
			}
		}
	}
}
