// Package loadgen drives any Envoy RateLimitService (ShouldRateLimit over
// gRPC) with a bounded load and measures it: requests per second, answers by
// code, errors by gRPC code, latency quantiles from a log-linear histogram
// and, when given a Redis address, the store's work per request.
//
// The load is closed-loop (each caller sends its next request when the last
// one returns) or fixed-rate open-loop, where latency is measured from each
// request's intended send time on the schedule so that a stalled server is
// not hidden by the load generator waiting for it (coordinated omission).
//
// It also owns the do-nothing RLS handler ([NoopService], [NewGRPCServer])
// that measures the transport's own ceiling in the same run as real servers.
//
// Every run is bounded in time (and optionally in count), stops by itself,
// and refuses any target or Redis address that is not a loopback address
// unless remote load is explicitly allowed.
//
// The package depends on gRPC, the Envoy protos and go-redis only, never on
// sluice's own packages: it measures them from the outside.
package loadgen
