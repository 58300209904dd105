package retry

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxSeconds is the largest delay-seconds value a time.Duration can hold.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter reads a Retry-After field value (RFC 9110 §10.2.3) and
// reports how long after now it asks the client to wait. Both forms are
// accepted: delay-seconds (one or more digits, nothing else: no sign, no
// fraction) and an HTTP-date in any of the three formats RFC 9110 requires
// recipients to parse. A date at or before now means "retry now" and yields
// 0. A delay too large for a time.Duration yields the largest one. ok is
// false for an empty or malformed value, which a client should ignore.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > maxSeconds { // only overflow gets here
			return math.MaxInt64, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// retryAfter is the wait a response asks for. An HTTP-date is measured
// from the response's own Date when it has a valid one: both were written
// by the server's clock, so a client whose clock is off by minutes still
// waits what the server meant. Without Date it falls back to now.
func retryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		now = date
	}
	return ParseRetryAfter(v, now)
}

// serverWait is the wait a retryable response asks for: its Retry-After,
// or, on a 429 without a valid one, its RateLimit reset.
func serverWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	if d, ok := retryAfter(resp, now); ok {
		return d, true
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return rateLimitReset(resp.Header)
	}
	return 0, false
}
