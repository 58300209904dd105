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
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// reply builds the response: statuses one to one with the descriptors,
// and, with forClient, headers and body for the client (a sidecar's
// recorded hits need the statuses only).
func (s *Service) reply(d *decision, req *rlsv3.RateLimitRequest, forClient bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors())),
	}
	b := &d.batch
	var denied []int // items that rejected the request
	for i := range resp.Statuses {
		j := d.itemOf[i]
		if j < 0 {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		}
		l, r := b.Limits[j], b.Results[j]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       currentLimit(l),
			LimitRemaining:     clampUint32(r.Remaining),
			DurationUntilReset: durationpb.New(micros(r.ResetAfter)),
		}
		if !r.Allowed && !l.ShadowMode {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			denied = append(denied, j)
		}
		resp.Statuses[i] = st
	}
	if len(b.Items) == 0 || !forClient {
		return resp
	}
	if denied != nil {
		s.overLimitHeaders(resp, b, denied)
	} else {
		all := make([]int, len(b.Items))
		for j := range all {
			all[j] = j
		}
		resp.ResponseHeadersToAdd = s.quotaHeaders(b, all, false)
	}
	return resp
}

func currentLimit(l *config.Limit) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.PolicyName(),
		RequestsPerUnit: l.RateLimit.RequestsPerUnit,
		Unit:            responseUnit(l.RateLimit.Unit),
	}
	if m := l.RateLimit.UnitMultiplier; m > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(m)
	}
	return cl
}

// quotaHeaders are RateLimit-Policy and RateLimit for the items idx, in
// the syntax of draft-ietf-httpapi-ratelimit-headers-10/-11: list members
// named by a string, with q (quota) and w (window, seconds) for a policy,
// r (remaining) and t (seconds until it is restored) for its state. On a
// rejection t is when a retry can succeed.
func (s *Service) quotaHeaders(b *Batch, idx []int, rejected bool) []*corev3.HeaderValue {
	var policy, state strings.Builder
	for n, j := range idx {
		l, r := b.Limits[j], b.Results[j]
		if n > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		name := sfString(l.PolicyName())
		policy.WriteString(name)
		policy.WriteString(";q=")
		policy.WriteString(strconv.FormatUint(uint64(l.RateLimit.RequestsPerUnit), 10))
		policy.WriteString(";w=")
		policy.WriteString(strconv.FormatInt(int64(l.RateLimit.Window()/time.Second), 10))
		t := r.ResetAfter
		if rejected {
			t = r.RetryAfter
		}
		state.WriteString(name)
		state.WriteString(";r=")
		state.WriteString(strconv.FormatInt(max(0, r.Remaining), 10))
		state.WriteString(";t=")
		state.WriteString(strconv.FormatInt(ceilSeconds(t), 10))
	}
	h := []*corev3.HeaderValue{
		{Key: HeaderPolicy, Value: policy.String()},
		{Key: HeaderRateLimit, Value: state.String()},
	}
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
		h = append(h,
			&corev3.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatUint(uint64(l.RateLimit.RequestsPerUnit), 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatInt(max(0, r.Remaining), 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(ceilSeconds(reset), 10)},
		)
	}
	return h
}

// overLimitHeaders describe the limits that denied, the one that fired
// (the longest wait) first, and add Retry-After, the reason and the
// problem-details body.
func (s *Service) overLimitHeaders(resp *rlsv3.RateLimitResponse, b *Batch, denied []int) {
	first := 0
	for n, j := range denied {
		if b.Results[j].RetryAfter > b.Results[denied[first]].RetryAfter {
			first = n
		}
	}
	denied[0], denied[first] = denied[first], denied[0]
	fired := b.Limits[denied[0]]
	retry := max(1, ceilSeconds(b.Results[denied[0]].RetryAfter))

	reason := fired.PolicyName()
	detail := "Rate limit " + strconv.Quote(reason) + " exceeded; retry in " + strconv.FormatInt(retry, 10) + " s."
	if b.Unavailable {
		reason = "rate limit store unavailable"
		detail = "The rate limit store is unavailable and this service denies requests until it returns; retry in " + strconv.FormatInt(retry, 10) + " s."
	}
	h := s.quotaHeaders(b, denied, true)
	h = append(h,
		&corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(retry, 10)},
		&corev3.HeaderValue{Key: HeaderReason, Value: headerSafe(reason)},
		&corev3.HeaderValue{Key: "Content-Type", Value: "application/problem+json"},
	)
	resp.ResponseHeadersToAdd = h
	names := make([]string, len(denied))
	for n, j := range denied {
		names[n] = b.Limits[j].PolicyName()
	}
	resp.RawBody = problemBody(names, detail)
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
