package limiter

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
)

// ProblemType is the RFC 9457 problem type of a quota-exceeded body, from
// draft-ietf-httpapi-ratelimit-headers.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Header names sluice sets on Envoy's response.
const (
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
	HeaderRetryAfter = "Retry-After"
	HeaderReason     = "X-RateLimit-Reason"
)

// Code is an answer's verdict, for a request or one of its descriptors.
// The zero value is not a verdict: answers carry OK or OverLimit only
// (Envoy asserts on its UNKNOWN).
//
// Codes are plain values, safe to share between goroutines.
type Code uint8

const (
	OK Code = iota + 1
	OverLimit
)

// Answer is a decided request as a client is told of it: statuses one to
// one with its descriptors, the verdict, and (DecideOptions.Content) the
// headers and, on a 429, the problem-details body. Adapters turn it into
// their wire form. It is read only, and so safe to read from many
// goroutines.
type Answer struct {
	// Config is the snapshot the request was matched on: Status.Limit is
	// one of its limits unless Status.Overridden.
	Config   *config.Config
	Overall  Code
	Statuses []Status
	Headers  []Header
	Body     []byte
	// owner is the decision holding the answer, until Service.Done.
	owner *decision
}

// Status is the answer for one descriptor.
//
// A plain value, safe to copy and to read from many goroutines.
type Status struct {
	// Limit is the limit that applied, nil when none did (nothing matched,
	// or an unlimited limit); with Content only. Read only.
	Limit      *config.Limit
	ResetAfter time.Duration
	// RetryAfter is how long until a retry can succeed: 0 when admitted
	// or unlimited. A sidecar's flag cache holds the key for it.
	RetryAfter time.Duration
	Remaining  uint32
	Code       Code
	// Limited: a limit applied to the descriptor (it matched one, and the
	// limit is not unlimited); Remaining, ResetAfter and RetryAfter speak
	// of it.
	Limited bool
	// Overridden: Limit is Envoy's per-request override, made for this
	// request, not one of Answer.Config's.
	Overridden bool
	// Allowance, for hits a sidecar recorded with its demand
	// (DecideOptions.Demand), is the units it may admit for the key until
	// it reports again (pkg/share), or -1: none, decide as usual.
	Allowance float64
	// Hold, with no allowance, is the units of the key it may keep
	// unrecorded for Demand.Hold (share.Tracker.AllotHold); 0: none.
	Hold float64
}

// Header is one response header for the client.
//
// A plain value, safe to share between goroutines.
type Header struct{ Key, Value string }

// smallHeaders is how many headers an answer holds in the decision's own
// space: a 429's five (the legacy three are allocated apart).
const smallHeaders = 5

// answer fills d.answer: statuses one to one with the descriptors and,
// with content, their limits, the headers and the body for the client.
func (s *Service) answer(d *decision, content bool) {
	a := &d.answer
	a.Config, a.Overall = d.cfg, OK
	n := d.batch.Request.Len()
	if n <= smallRequest {
		a.Statuses = d.small.statuses[:n]
	} else {
		a.Statuses = make([]Status, n)
	}
	b := &d.batch
	var texts [smallRequest]*limitText
	text := func(j int) *limitText {
		if j < smallRequest && texts[j] != nil {
			return texts[j]
		}
		t := s.text(d.cfg, b.Limits[j], d.overridden[j])
		if j < smallRequest {
			texts[j] = t
		}
		return t
	}
	var deniedSpace, quotaSpace [smallRequest]int
	denied := deniedSpace[:0] // items that rejected the request
	quotaDenied, quotas := quotaSpace[:0], 0
	for i := range a.Statuses {
		st := &a.Statuses[i]
		st.Code = OK
		j := d.itemOf[i]
		if j < 0 {
			continue
		}
		l, r := b.Limits[j], b.Results[j]
		st.Limited = true
		if content {
			st.Limit, st.Overridden = l, d.overridden[j]
		}
		st.Remaining = clampUint32(r.Remaining)
		st.ResetAfter = durationFromMicros(r.ResetAfter)
		if !r.Allowed {
			st.RetryAfter = durationFromMicros(r.RetryAfter)
		}
		switch s.role(l) {
		case quota:
			quotas++
			if !r.Allowed {
				st.Code = OverLimit
				quotaDenied = append(quotaDenied, j)
			}
		case enforced:
			if !r.Allowed {
				st.Code, a.Overall = OverLimit, OverLimit
				denied = append(denied, j)
			}
		}
	}
	// Quota descriptors fail the request only all together, as the
	// reference's quota_mode does: each over limit is reported in its
	// status, and the request goes on while any has room.
	if len(denied) == 0 && quotas > 0 && len(quotaDenied) == quotas {
		a.Overall, denied = OverLimit, quotaDenied
	}
	if s.opts.ShadowAll && a.Overall == OverLimit {
		// Statuses say which limits are over; the request is admitted.
		a.Overall, denied = OK, denied[:0]
	}
	if len(b.Items) == 0 || !content {
		return
	}
	a.Headers = d.small.headers[:0]
	if len(denied) > 0 {
		s.overLimitHeaders(a, b, denied, text)
		return
	}
	var allSpace [smallRequest]int
	all := allSpace[:0]
	for j := range b.Items {
		all = append(all, j)
	}
	s.quotaHeaders(a, b, all, false, text)
}

// quotaHeaders adds RateLimit-Policy and RateLimit for the items idx, in
// the syntax of draft-ietf-httpapi-ratelimit-headers-10/-11: list members
// named by a string, with q (quota) and w (window, seconds) for a policy,
// r (remaining) and t (seconds until it is restored) for its state. On a
// rejection t is when a retry can succeed.
func (s *Service) quotaHeaders(a *Answer, b *Batch, idx []int, rejected bool, text func(int) *limitText) {
	var policy string
	if len(idx) == 1 {
		policy = text(idx[0]).policy // as configured: no allocation
	} else {
		var pb []byte
		for n, j := range idx {
			if n > 0 {
				pb = append(pb, ", "...)
			}
			pb = append(pb, text(j).policy...)
		}
		policy = string(pb)
	}
	var buf [128]byte
	state := buf[:0]
	for n, j := range idx {
		r := b.Results[j]
		t := r.ResetAfter
		if rejected {
			t = r.RetryAfter
		}
		if n > 0 {
			state = append(state, ", "...)
		}
		state = append(state, text(j).name...)
		state = append(state, ";r="...)
		state = strconv.AppendInt(state, max(0, r.Remaining), 10)
		state = append(state, ";t="...)
		state = strconv.AppendInt(state, ceilSeconds(t), 10)
	}
	a.Headers = append(a.Headers, Header{HeaderPolicy, policy}, Header{HeaderRateLimit, string(state)})
	if s.opts.LegacyHeaders {
		// The most restrictive of idx: the first when rejected (the one
		// that fired), else the one with least left.
		j := idx[0]
		for _, k := range idx {
			if !rejected && b.Results[k].Remaining < b.Results[j].Remaining {
				j = k
			}
		}
		l, r := b.Limits[j], b.Results[j]
		reset := r.ResetAfter
		if rejected {
			reset = r.RetryAfter
		}
		a.Headers = append(a.Headers,
			Header{"X-RateLimit-Limit", strconv.FormatUint(uint64(l.RateLimit.RequestsPerUnit), 10)},
			Header{"X-RateLimit-Remaining", strconv.FormatInt(max(0, r.Remaining), 10)},
			Header{"X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(reset), 10)},
		)
	}
}

// overLimitHeaders describe the limits that denied, the one that fired
// (the longest wait) first, and add Retry-After, the reason and the
// problem-details body.
func (s *Service) overLimitHeaders(a *Answer, b *Batch, denied []int, text func(int) *limitText) {
	first := 0
	for n, j := range denied {
		if b.Results[j].RetryAfter > b.Results[denied[first]].RetryAfter {
			first = n
		}
	}
	denied[0], denied[first] = denied[first], denied[0]
	fired := b.Limits[denied[0]]
	retry := max(1, ceilSeconds(b.Results[denied[0]].RetryAfter))

	s.quotaHeaders(a, b, denied, true, text)
	reason := text(denied[0]).reason
	switch {
	case b.Unavailable:
		reason = "rate limit store unavailable"
		a.Body = problemBody(policyNames(b, denied),
			"The rate limit store is unavailable and this service denies requests until it returns; retry in "+strconv.FormatInt(retry, 10)+" s.")
	case len(denied) == 1 && text(denied[0]).bodyHead != "":
		a.Body = text(denied[0]).body(retry)
	default:
		a.Body = problemBody(policyNames(b, denied), overLimitDetail(fired.PolicyName(), strconv.FormatInt(retry, 10)))
	}
	a.Headers = append(a.Headers,
		Header{HeaderRetryAfter, strconv.FormatInt(retry, 10)},
		Header{HeaderReason, reason},
		Header{"Content-Type", "application/problem+json"},
	)
}

// overLimitDetail is the problem body's detail for a 429 the limit name
// fired, with a retry in retry seconds.
func overLimitDetail(name, retry string) string {
	return "Rate limit " + strconv.Quote(name) + " exceeded; retry in " + retry + " s."
}

func policyNames(b *Batch, idx []int) []string {
	names := make([]string, len(idx))
	for n, j := range idx {
		names[n] = b.Limits[j].PolicyName()
	}
	return names
}

// problem is an RFC 9457 problem-details document of the draft's
// quota-exceeded type.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

func problemBody(violated []string, detail string) []byte {
	body, err := json.Marshal(problem{
		Type:             ProblemType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           429,
		Detail:           detail,
		ViolatedPolicies: violated,
	})
	if err != nil {
		// Strings and ints always marshal.
		panic("limiter: problem body: " + err.Error())
	}
	return body
}

// sfString quotes s as a Structured Field string (RFC 8941 §3.3.3):
// printable ASCII only, with \ and " escaped; anything else becomes '?'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// headerSafe keeps a header value to visible ASCII and spaces.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// durationFromMicros is us µs (an algorithm.Result's unit) as a Duration.
func durationFromMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// ceilSeconds rounds µs up to whole seconds.
func ceilSeconds(us int64) int64 {
	if us <= 0 {
		return 0
	}
	return (us + 999_999) / 1_000_000
}

func clampUint32(n int64) uint32 {
	switch {
	case n <= 0:
		return 0
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
