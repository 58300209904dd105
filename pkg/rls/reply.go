package rls

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// smallReply is how many statuses a reply holds in its own allocation
// (Envoy's routes mostly send one or two descriptors), and smallHeaders how
// many header values: an admitted request's two quota headers. A 429's
// other three are allocated together apart.
const (
	smallReply   = 2
	smallHeaders = 2
	maxHeaders   = 5
)

// replySpace is a small request's response, its statuses and its headers
// in one allocation. The messages are never copied, only pointed into.
type replySpace struct {
	resp     rlsv3.RateLimitResponse
	statuses [smallReply]*rlsv3.RateLimitResponse_DescriptorStatus
	status   [smallReply]rlsv3.RateLimitResponse_DescriptorStatus
	reset    [smallReply]durationpb.Duration
	headers  [maxHeaders]*corev3.HeaderValue
	values   [smallHeaders]corev3.HeaderValue
}

// responseCode is a verdict as Envoy's message says it.
func responseCode(c limiter.Code) rlsv3.RateLimitResponse_Code {
	if c == limiter.OverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// reply writes the core's answer as Envoy's response.
func (s *Service) reply(a *limiter.Answer) *rlsv3.RateLimitResponse {
	sp := new(replySpace)
	resp := &sp.resp
	resp.OverallCode = responseCode(a.Overall)
	n := len(a.Statuses)
	if n <= smallReply {
		resp.Statuses = sp.statuses[:n]
	} else {
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range a.Statuses {
		as := &a.Statuses[i]
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		if i < smallReply {
			st = &sp.status[i]
		} else {
			st = new(rlsv3.RateLimitResponse_DescriptorStatus)
		}
		resp.Statuses[i] = st
		st.Code = responseCode(as.Code)
		if as.Limit != nil {
			// Envoy reads it for its own X-RateLimit headers.
			st.CurrentLimit = s.currentLimit(a.Config, as.Limit, as.Overridden)
		}
		if !as.Limited {
			continue
		}
		st.LimitRemaining = as.Remaining
		if i < smallReply {
			st.DurationUntilReset = &sp.reset[i]
			setDuration(st.DurationUntilReset, as.ResetAfter)
		} else {
			st.DurationUntilReset = durationpb.New(as.ResetAfter)
		}
	}
	if len(a.Headers) > 0 {
		if len(a.Headers) <= maxHeaders {
			resp.ResponseHeadersToAdd = sp.headers[:len(a.Headers)]
		} else {
			resp.ResponseHeadersToAdd = make([]*corev3.HeaderValue, len(a.Headers))
		}
		var more []corev3.HeaderValue // one allocation for those past the space
		if len(a.Headers) > smallHeaders {
			more = make([]corev3.HeaderValue, len(a.Headers)-smallHeaders)
		}
		for i, h := range a.Headers {
			hv := &sp.values[min(i, smallHeaders-1)]
			if i >= smallHeaders {
				hv = &more[i-smallHeaders]
			}
			hv.Key, hv.Value = h.Key, h.Value
			resp.ResponseHeadersToAdd[i] = hv
		}
	}
	resp.RawBody = a.Body
	return resp
}

// setDuration sets a protobuf Duration to d, as durationpb.New does.
func setDuration(dst *durationpb.Duration, d time.Duration) {
	dst.Seconds = int64(d / time.Second)
	dst.Nanos = int32(d % time.Second)
}

// responseUnit maps our unit to the one a reply's current_limit carries.
func responseUnit(u config.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case config.UnitSecond:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case config.UnitMinute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case config.UnitHour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case config.UnitDay:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case config.UnitWeek:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case config.UnitMonth:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case config.UnitYear:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// CurrentLimitWindow is the window a reply's current_limit describes (its
// unit times its multiplier), or false when its unit is not one of ours.
func CurrentLimitWindow(cl *rlsv3.RateLimitResponse_RateLimit) (time.Duration, bool) {
	for u := config.UnitSecond; u <= config.UnitYear; u++ {
		if responseUnit(u) == cl.GetUnit() {
			return u.Duration() * time.Duration(max(1, cl.GetUnitMultiplier().GetValue())), true
		}
	}
	return 0, false
}

// currentLimit returns l's current_limit message: once per config
// snapshot for a configured limit, shared by every reply (read only);
// afresh for one a request overrode.
func (s *Service) currentLimit(cfg *config.Config, l *config.Limit, overridden bool) *rlsv3.RateLimitResponse_RateLimit {
	if overridden {
		return newCurrentLimit(l)
	}
	return s.limits.Get(cfg, l, newCurrentLimit)
}

func newCurrentLimit(l *config.Limit) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.RateLimit.Name, // as the reference: empty when the config names none
		RequestsPerUnit: l.RateLimit.RequestsPerUnit,
		Unit:            responseUnit(l.RateLimit.Unit),
	}
	if m := l.RateLimit.UnitMultiplier; m > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(m)
	}
	return cl
}
