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
//   - Limiter, a token bucket a client sets below a server's limit to pace
//     bulk work so that most 429s never happen.
//
// Both take their time from the caller where it matters (Options.Clock,
// Limiter.AllowAt, Limiter.ReserveAt), so tests step through time instead
// of sleeping.
//
// The package depends on the standard library only and must not import any
// other sluice package: client programs import it without the server.
package retry
