// Package limiter is sluice's decision core. A request, read through a
// view of its wire form (Request: Envoy's protobuf via pkg/rls, or any
// other adapter's), is validated against the request caps, each descriptor
// matched to its configured limit (pkg/config; Envoy's per-request
// overrides held to the same rules), and all its limits decided at once,
// all or nothing: by the flag cache when a key is known to be over limit,
// else by the Decider (a store behind StoreDecider's failure modes,
// breaker and shedding, or the sidecar's local tier). The result is an
// Answer: statuses one to one with the descriptors, and what a good 429
// carries (Retry-After, the draft RateLimit and RateLimit-Policy headers,
// the reason, the problem-details body), for an adapter to write in its
// own form. It counts decisions (Prometheus) and logs rejections,
// rate-limited.
//
// Data flows one way: adapter (pkg/rls, pkg/httplimit) → limiter → store
// (pkg/global, through the Store interface it declares) → pkg/algorithm.
// It must not import gRPC, protobuf, a store or an adapter
// (internal/testkit/arch's test holds it to that), so the simulator and any Go
// program can decide as the server does without them.
package limiter
