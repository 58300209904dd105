// Package localtier is the sidecar's decision logic (cmd/localfilter), and
// the server's in cached Redis mode: a limiter.Decider that answers from
// memory first and leaves the precise limit to an upstream sluice server
// (for the cached server, its own Redis store called in process:
// rls.InProcess).
//
// For each request, after limiter.Service's flag cache ("already over limit
// until T", the same pkg/cache the server uses), which async flush answers and
// sync upstream answers fill:
//
//  1. a local token bucket per limit (pkg/localbucket) at Fraction of the
//     limit, all or nothing. At Fraction 1 it never rejects what the global
//     limit would admit (see localLimit); below 1 it splits the limit across
//     proxies.
//  2. the global decision. In Sync mode the upstream decides every request
//     that passed (exact), and the local tokens of a request it rejects are
//     given back. In Async mode the request is admitted from memory and its
//     hits are sent to the upstream aggregated per key, every FlushInterval
//     or as soon as BatchSize keys are pending, marked as already admitted
//     (rls.SidecarRecord) so that the upstream records every one of them even
//     past the limit: the global state goes into debt (up to one more
//     capacity of the limit: algorithm.Decide) and holds everyone back until
//     it is repaid. Each key is sent with the path of the configured limit
//     it matched here (rls.LimitPathKey) and its values as they are counted
//     (limiter.EntryValue, long ones by digest), so a pending key costs a few
//     hundred bytes whatever the request carried. The answers flag used-up
//     keys in the cache until the upstream says they admit again.
//
// # Async overshoot
//
// Once a key's global limit is used up, a sidecar goes on admitting it from
// its local bucket until the answer to its next flush flags the key. The
// hits at risk are those admitted since its last flush that the limit still
// had room for: a span of at most C = F + lag + RTT (F the flush interval,
// lag how late the flusher ran, RTT the flush's round trip, itself bounded
// by Timeout). The same holds each time a flag expires while the global
// state is still short; the flag lasts until the upstream's state, debt
// included, admits again, so under a bucket algorithm the debt of one cycle
// is repaid before the next starts (a window algorithm forgets it when its
// window turns). With N sidecars, each holding a local bucket of rate r and capacity
// b for the key, the hits admitted beyond the limit are at most
//
//	N · min(b + r·C, q(C))
//
// plus one request's cost per sidecar (a request between its flag check and
// its local take), where q(C) is the most a sidecar is offered for the key
// within any span C. Every admitted hit is in the global state, so later
// requests everywhere pay for the overshoot and the admitted rate converges
// to the limit. The metrics sluice_localfilter_flush_duration_seconds and
// sluice_localfilter_flush_lag_seconds show RTT and lag; the e2e tests
// measure the overshoot against this bound.
//
// # Shares on tight keys
//
// With each flush the sidecar reports, per key, the units it was asked
// for per second since it last reported the key, admitted or not
// (rls.DemandKey). On a key the upstream finds tight it answers with an
// allowance, the sidecar's share of what the limit has left (pkg/share for
// the rule); the sidecar then admits the key at most that far until the
// next answer, and nothing once three flush intervals pass without one (a
// stale allowance never admits). A key that is not tight gets none and is
// decided as above. While the upstream is away, allowances are set aside
// and the fallback share decides.
//
// # Upstream failures
//
// Upstream calls are bounded by Timeout, flush calls by at least 1 s. After
// a failed call the sidecar
// decides locally at FallbackShare of its local share (buckets are capped to
// it, so a sidecar cannot spend a full local share while nobody counts it
// globally), marks those answers degraded (never cached as flags), and
// probes the upstream again every RetryInterval, one call at a time. In
// either mode the hits admitted meanwhile stay pending, within MaxPending
// keys and MaxPendingBytes (hits of further keys are dropped and counted),
// and are recorded
// when the upstream returns, so the global state learns of them; except
// those held past the time their limit remembers a hit, which would put the
// key into a debt nobody ran up (see worth). A sync
// call that timed out may still have been counted upstream (a slow server
// acts on it later) and is then decided again by the fallback: an outage
// can over-count one request per timed-out call, never under-count. So can
// a flush call that timed out, by the hits it carried, which are sent
// again; its longer bound keeps that to an upstream stalled past a second.
//
// It depends on pkg/rls (the Decider contract and the sidecar metadata),
// pkg/localbucket, pkg/cache and the Envoy protos; not on a store.
package localtier
