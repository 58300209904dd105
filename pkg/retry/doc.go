// Package retry is for clients of rate-limited HTTP APIs, sluice's own
// included. It owns two things a well-behaved caller needs:
//
//   - Transport, an http.RoundTripper that retries 429 and 5xx answers and
//     failed connections with capped exponential backoff and full jitter,
//     prefers the server's Retry-After (or a 429's RateLimit reset time) to
//     its own schedule, repeats only requests that are safe to repeat, and
//     bounds the attempts, each wait and the total time. When it gives up
//     it hands back the last response, body intact, so the caller sees
//     what the server said.
//   - pacing: Options.Pace, a golang.org/x/time/rate Limiter set below a
//     server's limit, spaces out every attempt, retries included, so that
//     most 429s never happen.
//
// The Transport takes its time from Options.Clock, so tests step through
// time instead of sleeping.
//
// The package depends on the standard library and golang.org/x/time only
// and must not import any other sluice package: client programs import it
// without the server.
package retry
