package limiter

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestGolden pins the exact statuses, headers and body of an admitted
// request and of the 429 that follows, for a fixed window 15 s into its
// minute.
func TestGolden(t *testing.T) {
	h := start(t, Options{})
	r := edge(desc("remote_address", "203.0.113.7"))

	a := h.decide(t, r)
	want := []Header{{HeaderPolicy, `"per-client";q=3;w=60`}, {HeaderRateLimit, `"per-client";r=2;t=45`}}
	if !slices.Equal(a.Headers, want) || verdict(a) != "OK:OK" || a.Body != nil {
		t.Fatalf("first request: %s headers %v, body %q; want OK %v and no body", verdict(a), a.Headers, a.Body, want)
	}
	st := a.Statuses[0]
	if st.Limit.PolicyName() != "per-client" || st.Limit != a.Config.Match("edge", r.descs[0].entries) || !st.Limited || st.Overridden ||
		st.Remaining != 2 || st.ResetAfter != 45*time.Second || st.RetryAfter != 0 {
		t.Fatalf("status = %+v; want per-client from the config, 2 left, reset in 45s, no retry", st)
	}
	h.decide(t, r)
	h.decide(t, r)
	a = h.decide(t, r)
	want = []Header{
		{HeaderPolicy, `"per-client";q=3;w=60`},
		{HeaderRateLimit, `"per-client";r=0;t=45`},
		{HeaderRetryAfter, "45"},
		{HeaderReason, "per-client"},
		{"Content-Type", "application/problem+json"},
	}
	if !slices.Equal(a.Headers, want) || verdict(a) != "OVER_LIMIT:OVER_LIMIT" {
		t.Fatalf("fourth request: %s headers %v; want OVER_LIMIT %v", verdict(a), a.Headers, want)
	}
	if st := a.Statuses[0]; st.RetryAfter != 45*time.Second || st.Remaining != 0 {
		t.Errorf("fourth request's status = %+v; want a retry in 45s, none left", st)
	}
	wantBody := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Rate limit \"per-client\" exceeded; retry in 45 s.","violated-policies":["per-client"]}`
	if string(a.Body) != wantBody {
		t.Fatalf("body = %s\nwant %s", a.Body, wantBody)
	}
}

// TestLegacyHeaders: with LegacyHeaders, X-RateLimit-* describe the most
// restrictive limit: the one with least left when admitted, the one that
// fired on a 429 (its Reset the retry time).
func TestLegacyHeaders(t *testing.T) {
	h := start(t, Options{LegacyHeaders: true})
	r := edge(desc("api_key", "a"), desc("remote_address", "a"))
	for i, want := range []string{"3/2/45", "3/1/45", "3/0/45", "3/0/45"} {
		hd := headerMap(h.decide(t, r))
		if got := hd["X-RateLimit-Limit"] + "/" + hd["X-RateLimit-Remaining"] + "/" + hd["X-RateLimit-Reset"]; got != want {
			t.Errorf("request %d: limit/remaining/reset %s; want %s", i+1, got, want)
		}
	}
}

// TestOverLimitHeadersNameTheLimitThatFired: when several limits refuse,
// every header describes them all, the one with the longest wait (the one
// that fired) first; Retry-After, the reason and the body's detail are
// its.
func TestOverLimitHeadersNameTheLimitThatFired(t *testing.T) {
	h := start(t, Options{Config: configOf(t, `domain: edge
descriptors:
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-minute, algorithm: fixed_window}
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 1, name: per-hour, algorithm: fixed_window}
`)})
	r := edge(desc("minute", "x"), desc("hour", "x"))
	h.decide(t, r)
	a := h.decide(t, r)
	hourLeft := 3600 - (t0/1_000_000)%3600
	want := []Header{
		{HeaderPolicy, `"per-hour";q=1;w=3600, "per-minute";q=1;w=60`},
		{HeaderRateLimit, fmt.Sprintf(`"per-hour";r=0;t=%d, "per-minute";r=0;t=45`, hourLeft)},
		{HeaderRetryAfter, fmt.Sprint(hourLeft)},
		{HeaderReason, "per-hour"},
		{"Content-Type", "application/problem+json"},
	}
	if !slices.Equal(a.Headers, want) || verdict(a) != "OVER_LIMIT:OVER_LIMIT,OVER_LIMIT" {
		t.Fatalf("both over: %s headers %v\nwant %v", verdict(a), a.Headers, want)
	}
	var body problem
	if err := json.Unmarshal(a.Body, &body); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`Rate limit "per-hour" exceeded; retry in %d s.`, hourLeft); body.Detail != want ||
		!slices.Equal(body.ViolatedPolicies, []string{"per-hour", "per-minute"}) || body.Type != ProblemType || body.Status != 429 {
		t.Errorf("body %+v; want per-hour's detail, both policies", body)
	}
}

// TestHeaderNamesEscaped: a limit's name reaches the headers as a
// Structured Field string (printable ASCII, quotes and backslashes
// escaped) and the reason as visible ASCII; the problem body, JSON, says
// it as configured, whatever it holds.
func TestHeaderNamesEscaped(t *testing.T) {
	for _, tt := range []struct{ yamlName, name, policy, reason string }{
		{`'caf\ "é"'`, `caf\ "é"`, `"caf\\ \"??\"";q=1;w=60`, `caf\ "?"`},
		// (A name holding the marker the body is split at, \x01, is refused
		// by the config: names hold no control characters.)
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{Config: configOf(t, `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: `+tt.yamlName+`}
`)})
			h.decide(t, edge(desc("k", "v")))
			a := h.decide(t, edge(desc("k", "v")))
			hd := headerMap(a)
			if hd[HeaderPolicy] != tt.policy || hd[HeaderReason] != tt.reason {
				t.Errorf("policy %q, reason %q; want %q, %q", hd[HeaderPolicy], hd[HeaderReason], tt.policy, tt.reason)
			}
			var body problem
			if err := json.Unmarshal(a.Body, &body); err != nil || !slices.Equal(body.ViolatedPolicies, []string{tt.name}) ||
				body.Detail != fmt.Sprintf("Rate limit %q exceeded; retry in 45 s.", tt.name) {
				t.Errorf("body %s (%v); want the name as configured, a retry in 45 s", a.Body, err)
			}
		})
	}
}

// TestCodesAndTimesOnly: without DecideOptions.Content (a sidecar's call)
// the answer carries codes and times only: no limits, headers or body.
func TestCodesAndTimesOnly(t *testing.T) {
	h := start(t, Options{})
	r := edge(desc("remote_address", "s"))
	for range 3 {
		h.decide(t, r)
	}
	a, err := h.svc.Decide(t.Context(), r, DecideOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := a.Statuses[0]
	if verdict(a) != "OVER_LIMIT:OVER_LIMIT" || st.RetryAfter != 45*time.Second || !st.Limited ||
		st.Limit != nil || a.Headers != nil || a.Body != nil {
		t.Errorf("%s, status %+v, headers %v, body %q; want OVER_LIMIT, retry in 45s, nothing else", verdict(a), st, a.Headers, a.Body)
	}
}

// TestDoneReusesNothingStale: an answer handed back with Done lends its
// space to a later request, which sees none of it: a 429's five headers,
// body and statuses, then an unlimited request's one status and nothing
// else. A second Done does nothing: two answers taken after it are two.
// (The pool may drop what it is given, under the race detector at random:
// hence the rounds.)
func TestDoneReusesNothingStale(t *testing.T) {
	h := start(t, Options{})
	for round := range 8 {
		r := edge(desc("remote_address", fmt.Sprintf("203.0.113.%d", round)))
		for range 3 {
			h.svc.Done(h.decide(t, r))
		}
		a := h.decide(t, r)
		if verdict(a) != "OVER_LIMIT:OVER_LIMIT" || len(a.Headers) != 5 || a.Body == nil {
			t.Fatalf("fourth request: %s, %d headers, body %q; want a 429's", verdict(a), len(a.Headers), a.Body)
		}
		h.svc.Done(a)
		h.svc.Done(a)
		b, c := h.decide(t, edge(desc("open", "x"))), h.decide(t, edge(desc("open", "y")))
		for _, x := range []*Answer{b, c} {
			if verdict(x) != "OK:OK" || x.Headers != nil || x.Body != nil || x.Statuses[0].Limited || x.Statuses[0].Limit != nil {
				t.Fatalf("after Done: %s, headers %v, body %q, status %+v; want a bare OK", verdict(x), x.Headers, x.Body, x.Statuses[0])
			}
		}
		if b == c {
			t.Fatal("two answers in one space: Done gave one decision back twice")
		}
		h.svc.Done(b)
		h.svc.Done(c)
	}
}
