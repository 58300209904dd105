package retry

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	date := func(d time.Duration) string { return t0.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"2", 2 * time.Second, true},
		{" 120 ", 120 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"99999999999999999999", math.MaxInt64, true},  // overflows int64
		{"9223372036", 9223372036 * time.Second, true}, // the largest that fits
		{"9223372037", math.MaxInt64, true},            // overflows Duration
		{"", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"Sat, 14 Mar 2026 15:09:99 GMT", 0, false},
		{date(3 * time.Second), 3 * time.Second, true},
		{date(time.Hour), time.Hour, true},
		{date(0), 0, true},
		{date(-time.Minute), 0, true}, // in the past: retry now
		{t0.Add(5 * time.Second).Format(time.RFC850), 5 * time.Second, true},
		{t0.Add(6 * time.Second).Format(time.ANSIC), 6 * time.Second, true},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, t0)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRetryAfterUsesServerDate(t *testing.T) {
	// The server's clock is 10 minutes behind ours; its date still means
	// "in 4 seconds".
	server := t0.Add(-10 * time.Minute)
	resp := &http.Response{Header: http.Header{
		"Retry-After": {server.Add(4 * time.Second).Format(http.TimeFormat)},
		"Date":        {server.Format(http.TimeFormat)},
	}}
	if got, ok := retryAfter(resp, t0); got != 4*time.Second || !ok {
		t.Errorf("retryAfter = %v, %v; want 4s, true", got, ok)
	}
	resp.Header.Set("Date", "garbage")
	if got, ok := retryAfter(resp, t0); got != 0 || !ok {
		t.Errorf("retryAfter with a bad Date = %v, %v; want 0, true (measured from now)", got, ok)
	}
}
