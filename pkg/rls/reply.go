package rls

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
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

// spaceHeaders is how many headers a reply holds in its own allocation:
// the two quota headers of an admitted request. A rejection's further
// headers (Retry-After, the reason, the content type) and the legacy ones
// are allocated apart.
const spaceHeaders = 2

// replySpace is a small request's reply, its statuses and its quota
// headers in one allocation (about 650 bytes). The messages are never
// copied, only pointed into.
type replySpace struct {
	resp     rlsv3.RateLimitResponse
	statuses [smallRequest]*rlsv3.RateLimitResponse_DescriptorStatus
	status   [smallRequest]rlsv3.RateLimitResponse_DescriptorStatus
	reset    [smallRequest]durationpb.Duration
	headers  [5]*corev3.HeaderValue // room for a 429's five
	values   [spaceHeaders]corev3.HeaderValue
	used     int // values handed out
}

// header returns a header holding key and value, from the space while it
// lasts.
func (sp *replySpace) header(key, value string) *corev3.HeaderValue {
	if sp.used == spaceHeaders {
		return &corev3.HeaderValue{Key: key, Value: value}
	}
	h := &sp.values[sp.used]
	sp.used++
	h.Key, h.Value = key, value
	return h
}

// reply builds the response: statuses one to one with the descriptors,
// and, with forClient, their current limits, headers and body for the
// client (a sidecar's recorded hits need codes and times only).
func (s *Service) reply(d *decision, req *rlsv3.RateLimitRequest, forClient bool) *rlsv3.RateLimitResponse {
	sp := new(replySpace)
	resp := &sp.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	n := len(req.GetDescriptors())
	if n <= smallRequest {
		resp.Statuses = sp.statuses[:n]
	} else {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	b := &d.batch
	var texts [smallRequest]*limitText
	text := func(j int) *limitText {
		if j < smallRequest {
			if texts[j] == nil {
				texts[j] = s.texts.of(d.cfg, b.Limits[j], d.overridden[j])
			}
			return texts[j]
		}
		return s.texts.of(d.cfg, b.Limits[j], d.overridden[j])
	}
	var deniedSpace [smallRequest]int
	denied := deniedSpace[:0] // items that rejected the request
	for i := range resp.Statuses {
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		if i < smallRequest {
			st = &sp.status[i]
		} else {
			st = new(rlsv3.RateLimitResponse_DescriptorStatus)
		}
		resp.Statuses[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		j := d.itemOf[i]
		if j < 0 {
			continue
		}
		l, r := b.Limits[j], b.Results[j]
		if forClient {
			// Envoy reads it for its own X-RateLimit headers; a sidecar's
			// recorded hits are answered with the code and times alone.
			st.CurrentLimit = text(j).current
		}
		st.LimitRemaining = clampUint32(r.Remaining)
		if i < smallRequest {
			st.DurationUntilReset = &sp.reset[i]
			setDuration(st.DurationUntilReset, micros(r.ResetAfter))
		} else {
			st.DurationUntilReset = durationpb.New(micros(r.ResetAfter))
		}
		if !r.Allowed && !l.ShadowMode {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			denied = append(denied, j)
		}
	}
	if len(b.Items) == 0 || !forClient {
		return resp
	}
	resp.ResponseHeadersToAdd = sp.headers[:0]
	if len(denied) > 0 {
		s.overLimitHeaders(sp, b, denied, text)
		return resp
	}
	var allSpace [smallRequest]int
	all := allSpace[:0]
	for j := range b.Items {
		all = append(all, j)
	}
	s.quotaHeaders(sp, b, all, false, text)
	return resp
}

// setDuration sets a protobuf Duration to d, as durationpb.New does.
func setDuration(dst *durationpb.Duration, d time.Duration) {
	dst.Seconds = int64(d / time.Second)
	dst.Nanos = int32(d % time.Second)
}

// quotaHeaders adds RateLimit-Policy and RateLimit for the items idx, in
// the syntax of draft-ietf-httpapi-ratelimit-headers-10/-11: list members
// named by a string, with q (quota) and w (window, seconds) for a policy,
// r (remaining) and t (seconds until it is restored) for its state. On a
// rejection t is when a retry can succeed.
func (s *Service) quotaHeaders(sp *replySpace, b *Batch, idx []int, rejected bool, text func(int) *limitText) {
	resp := &sp.resp
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
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		sp.header(HeaderPolicy, policy),
		sp.header(HeaderRateLimit, string(state)),
	)
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
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			sp.header("X-RateLimit-Limit", strconv.FormatUint(uint64(l.RateLimit.RequestsPerUnit), 10)),
			sp.header("X-RateLimit-Remaining", strconv.FormatInt(max(0, r.Remaining), 10)),
			sp.header("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(reset), 10)),
		)
	}
}

// overLimitHeaders describe the limits that denied, the one that fired
// (the longest wait) first, and add Retry-After, the reason and the
// problem-details body.
func (s *Service) overLimitHeaders(sp *replySpace, b *Batch, denied []int, text func(int) *limitText) {
	first := 0
	for n, j := range denied {
		if b.Results[j].RetryAfter > b.Results[denied[first]].RetryAfter {
			first = n
		}
	}
	denied[0], denied[first] = denied[first], denied[0]
	fired := b.Limits[denied[0]]
	retry := max(1, ceilSeconds(b.Results[denied[0]].RetryAfter))

	s.quotaHeaders(sp, b, denied, true, text)
	resp := &sp.resp
	reason := text(denied[0]).reason
	switch {
	case b.Unavailable:
		reason = "rate limit store unavailable"
		resp.RawBody = problemBody(policyNames(b, denied),
			"The rate limit store is unavailable and this service denies requests until it returns; retry in "+strconv.FormatInt(retry, 10)+" s.")
	case len(denied) == 1 && text(denied[0]).bodyHead != "":
		resp.RawBody = text(denied[0]).body(retry)
	default:
		resp.RawBody = problemBody(policyNames(b, denied), overLimitDetail(fired.PolicyName(), strconv.FormatInt(retry, 10)))
	}
	extra := new([3]corev3.HeaderValue) // one allocation for the three
	extra[0] = corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(retry, 10)}
	extra[1] = corev3.HeaderValue{Key: HeaderReason, Value: reason}
	extra[2] = corev3.HeaderValue{Key: "Content-Type", Value: "application/problem+json"}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &extra[0], &extra[1], &extra[2])
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
		panic("rls: problem body: " + err.Error())
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

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

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
