// Package simulate replays a stream of requests against a descriptor config
// offline, to tune limits before they are deployed: which limit each request
// matches, what each algorithm would have admitted, the worst bursts that got
// through, and where two algorithms disagree on the same traffic.
//
// It owns the simulation (Run, Compare, Accuracy), the trace sources (a CSV
// reader and generated patterns), the plot (an SVG writer) and the config
// check a CI job runs (Check). Decisions are algorithm.Decide on an
// in-memory map of per-key state, with the parameters config.RateLimit.Params gives the
// server, so a simulated limit counts exactly as a deployed one would.
//
// Time is the trace's own: an int64 count of microseconds, as in package
// algorithm. Nothing here reads a clock or sleeps, so a trace of a week runs
// in seconds and every run of the same trace gives the same answer.
//
// It imports the standard library, pkg/algorithm, pkg/config and pkg/rls
// (for the server's own parameters and caps) only: it opens no store and
// serves nothing, though pkg/rls brings the store and gRPC packages into
// the build.
package simulate
