// Package rls speaks Envoy's rate limit service: the gRPC
// envoy.service.ratelimit.v3.RateLimitService and its JSON twin, /json. It
// reads Envoy's request in place (a view the decision core, pkg/limiter,
// reads through limiter.Request), hands it to the core, and writes the
// core's answer as Envoy's response; errors become gRPC status codes here
// and nowhere else. It also carries the side channel a sluice sidecar
// uses on the same API (SidecarKey and the metadata around it), and who
// may use it (pkg/peerauth). It is Envoy's wire and nothing else:
// pkg/server assembles a whole service around it.
//
// It depends on the core and the Envoy protos, never on a store; the core
// must not depend on it.
package rls
