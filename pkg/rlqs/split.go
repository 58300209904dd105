package rlqs

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Share is one Envoy's part of a limit: the units a second its token
// bucket fills with, and the most it holds.
//
// A plain value, safe to share between goroutines.
type Share struct{ Rate, Burst float64 }

// split returns the shares of the Envoys whose demands are all (units a
// second each), in all's order, of a limit that refills rate units a
// second and holds burst. Each demand weighs at most the others'
// together, so that an Envoy claiming any demand takes at most half, and
// every other keeps at least half its proportional share. When the
// demands weigh at least rate, each gets rate in proportion to its weight;
// when they weigh less, each gets its demand and an equal part of the
// rest, so that an Envoy whose demand rises finds room at once. The burst
// is split as the rate is. The shares sum to rate and burst: the fleet
// never admits more than one token bucket of the limit's would.
func split(rate, burst float64, all []float64) []Share {
	shares := make([]Share, len(all))
	if len(all) == 0 || rate <= 0 {
		return shares
	}
	sum := 0.0
	for _, d := range all {
		sum += max(d, 0)
	}
	weigh := func(d float64) float64 {
		d = max(d, 0)
		if len(all) > 1 {
			d = min(d, sum-d)
		}
		return d
	}
	total := 0.0
	for _, d := range all {
		total += weigh(d)
	}
	for i, d := range all {
		r := weigh(d) + (rate-total)/float64(len(all))
		if total >= rate {
			r = rate * weigh(d) / total
		}
		shares[i] = Share{Rate: r, Burst: burst * r / rate}
	}
	return shares
}

// fillIntervals are the whole-second fill intervals an assignment uses,
// the shortest that states the rate within fillPrecision: Envoy refills
// its bucket continuously at tokens_per_fill / fill_interval, reading the
// interval in whole seconds only (rlqs-notes §3: a sub-second interval
// reads as unlimited).
var fillIntervals = []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}

// fillPrecision: tokens per fill at which rounding down loses at most
// 0.1 % (at 20 a fill, 5 %, an Envoy of 23.9 a second admitted 23).
const fillPrecision = 1000

// tokenBucket is s as Envoy's token bucket: tokens per fill rounded down
// (never above the share), at least one; at least one token held.
func tokenBucket(s Share) *typev3.TokenBucket {
	var iv time.Duration
	var tokens float64
	for _, iv = range fillIntervals {
		if tokens = math.Floor(s.Rate * iv.Seconds()); tokens >= fillPrecision {
			break
		}
	}
	return &typev3.TokenBucket{
		MaxTokens:     uint32(min(max(1, math.Floor(s.Burst)), math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(uint32(min(max(1, tokens), math.MaxUint32))),
		FillInterval:  durationpb.New(iv),
	}
}

// sameToEnvoy reports whether Envoy takes b for a: it compares max_tokens,
// tokens_per_fill and the nanoseconds of fill_interval only (rlqs-notes
// §3), so two buckets differing in whole seconds of fill_interval alone
// read as one, and the old one's rate stays.
func sameToEnvoy(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// next is the bucket to send after last so that Envoy applies it as b
// says: b, with one token more held when Envoy would take it for a
// different last.
func next(last, b *typev3.TokenBucket) *typev3.TokenBucket {
	if last != nil && sameToEnvoy(last, b) && last.GetFillInterval().GetSeconds() != b.GetFillInterval().GetSeconds() {
		b.MaxTokens++
	}
	return b
}
