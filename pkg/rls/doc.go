// Package rls is sluice's gRPC service: Envoy's
// envoy.service.ratelimit.v3.RateLimitService. A request is validated,
// matched against the current descriptor config snapshot (read once per
// request), turned into one decision call covering all of its limits, and
// answered with statuses one to one with its descriptors plus what a good
// 429 needs: Retry-After, the IETF draft RateLimit and RateLimit-Policy
// headers, a reason header and a problem-details body.
//
// The decision itself belongs to a Decider: the server's is a store (Redis
// or in-memory) behind failure modes and a circuit breaker (StoreDecider);
// the sidecar's is its local tier. Errors become gRPC status codes here and
// nowhere else.
//
// It depends on pkg/config, pkg/global (item and result types), pkg/flagcache
// and the Envoy protos; it must not depend on cmd/* or on how the process
// is wired.
package rls
