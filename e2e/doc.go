// Package e2e holds sluice's end-to-end tests: they build cmd/server and
// cmd/localfilter, start them as real processes on loopback next to a real
// redis-server (internal/testkit/redistest), and drive them over gRPC exactly as
// Envoy does, with the descriptors Envoy's rate-limit actions produce.
//
// Everything the tests start is bound to 127.0.0.1 on ports the kernel
// chooses, logs to the test's temporary directory (shown on failure), and is
// stopped in t.Cleanup; every load is bounded in time and count. The tests
// assert counts and bounds computed from the configuration, never speed:
// figures they log are for the notes, not for pass or fail.
//
// The package has no code outside its tests.
package e2e
