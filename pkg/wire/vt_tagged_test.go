//go:build vtprotobuf

package wire

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestTaggedBuildTakesTheFastPath: with -tags vtprotobuf (make, the
// Dockerfile, the benchmarks) the messages sluice writes have the
// generated encoder, so Codec uses it.
func TestTaggedBuildTakesTheFastPath(t *testing.T) {
	for _, m := range []any{&rlsv3.RateLimitResponse{}, &rlsv3.RateLimitRequest{}} {
		if _, ok := m.(vtMessage); !ok {
			t.Errorf("%T has no generated encoder under -tags vtprotobuf", m)
		}
	}
}
