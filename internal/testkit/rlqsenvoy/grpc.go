package rlqsenvoy

import (
	"context"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
)

// GRPC is a Dial over conn for e: each stream's answers are delivered to
// e at now() as they come, and a stream that ends is marked broken. The
// streams end with ctx.
func GRPC(ctx context.Context, conn grpc.ClientConnInterface, e func() *Envoy, now func() time.Time) Dial {
	client := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	return func() (Stream, error) {
		st, err := client.StreamRateLimitQuotas(ctx)
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				resp, err := st.Recv()
				if err != nil {
					e().Broken()
					return
				}
				e().Deliver(resp, now())
			}
		}()
		return st, nil
	}
}
