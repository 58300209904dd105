// Package rlqs is Envoy's rate limit quota service
// (envoy.service.rate_limit_quota.v3) on sluice's limits: the server side
// of the envoy.filters.http.rate_limit_quota filter, which decides every
// request on token buckets in the Envoy's own memory and reports its
// counts on one stream every 5 s.
//
// A reported bucket id is read as a descriptor of the stream's domain in
// the config's order (config.BucketEntries) and its allowed count recorded
// on the limit's global counter, as a sidecar's hits are; the Envoy is
// answered with its share of the limit (split): the limit's rate and
// burst divided among the Envoys reporting the key, by the requests each
// was asked for (fleet). The shares sum to the limit, scaled by a gain
// that makes up for what the Envoys' buckets waste of them (gain, at most
// gainMax, back to 1 when their demand jumps), so a fleet admits at most
// what one token bucket of the limit would, times the gain until its next
// reports, and what each Envoy's bucket holds; replicas on one Redis
// split each limit by their Envoys' demand (Peers). How Envoy treats what it is sent (whole seconds, bucket
// inheritance, expiry) follows its source: internal/testkit/rlqsenvoy.
package rlqs
