// Package redistest starts real Redis processes for tests: a single server
// ([Start]), a Redis Cluster ([StartCluster]) and a Sentinel watching one
// master ([StartSentinel]).
//
// Every process is Debian's redis-server, redis-cli or redis-sentinel binary,
// bound to 127.0.0.1 on a port chosen at random, with no disk persistence and
// its own t.TempDir. The helpers wait for readiness by polling with a
// deadline, and kill and reap every process in t.Cleanup, so a failing test
// leaks nothing. A missing binary fails the test with the command that
// installs it: tests that skip hide missing coverage.
//
// Tests sharing a server keep their keys apart with [Prefix] instead of
// flushing it.
//
// The package is for tests only. It depends on the standard library and
// go-redis, never on sluice's own packages, so any of them can use it.
package redistest
