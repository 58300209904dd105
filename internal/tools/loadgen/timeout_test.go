package loadgen

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// blockService holds every request until the caller gives up.
type blockService struct{ NoopService }

func (blockService) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestTimeoutCountsDeadlineExceeded(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, blockService{})
	res := run(t, Options{Target: addr, Requests: 3, Duration: 20 * time.Second, Timeout: 20 * time.Millisecond})
	checkCounts(t, res)
	if res.Sent != 3 || res.ErrorsByCode["DeadlineExceeded"] != 3 {
		t.Fatalf("sent %d, errors %v; want 3 DeadlineExceeded", res.Sent, res.ErrorsByCode)
	}
}

// hungService ignores its context and answers only when released; the
// client has to enforce its deadline by itself.
type hungService struct {
	NoopService
	release chan struct{}
}

func (s hungService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	<-s.release
	return s.NoopService.ShouldRateLimit(ctx, req)
}

func TestTimeoutWhenServerIgnoresDeadline(t *testing.T) {
	checkNoLeak(t)
	svc := hungService{release: make(chan struct{})}
	addr := startServer(t, svc)
	t.Cleanup(func() { close(svc.release) }) // before the server stops
	res := run(t, Options{Target: addr, Concurrency: 2, Requests: 4, Duration: 20 * time.Second, Timeout: 20 * time.Millisecond})
	checkCounts(t, res)
	if res.Sent != 4 || res.ErrorsByCode["DeadlineExceeded"] != 4 {
		t.Fatalf("sent %d, errors %v; want 4 DeadlineExceeded", res.Sent, res.ErrorsByCode)
	}
}

// deadlineService answers OK only when the request carries a deadline no
// further than want away (the grpc-timeout a -timeout must send).
type deadlineService struct {
	NoopService
	want time.Duration
}

func (s deadlineService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > s.want {
		return nil, status.Errorf(codes.FailedPrecondition, "deadline %v, %v; want within %v", dl, ok, s.want)
	}
	return s.NoopService.ShouldRateLimit(ctx, req)
}

func TestTimeoutTravelsAsDeadline(t *testing.T) {
	checkNoLeak(t)
	addr := startServer(t, deadlineService{want: 2 * time.Second})
	res := run(t, Options{Target: addr, Concurrency: 4, Requests: 100, Duration: 20 * time.Second, Timeout: 2 * time.Second})
	checkCounts(t, res)
	if res.OK != 100 {
		t.Fatalf("ok %d, errors %v; want every request to carry the deadline", res.OK, res.ErrorsByCode)
	}
}
