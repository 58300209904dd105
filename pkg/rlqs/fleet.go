package rlqs

import (
	"math"
	"sync"
	"time"
)

// fleet holds, per limit key, the Envoys (streams) drawing on it: the
// demand each last reported and the share the split gives it. At every
// report the key's rate is split again among its members whose demand is
// fresh; a member whose share changed by more than moved is poked, so that
// its stream pushes the new share at once rather than at its next report:
// the shares in force then sum to the limit within moved, whatever the
// order the Envoys report in. It holds at most maxKeys keys; a report on
// another key past that gets a share as if alone (the service counts it).
type fleet struct {
	mu      sync.Mutex
	keys    map[string]*fleetKey // guarded by mu
	maxKeys int
}

// fleetKey is one key of a fleet.
type fleetKey struct {
	members map[uint64]*member // by stream
	lim     shape              // its limit, as last reported
	handed  float64            // its rate last split here (0: not yet)
	gain    gain
}

type member struct {
	demand float64 // units a second asked for; below 0: not known yet
	// window holds its last reports' requests and the seconds they
	// cover, the demand's base (demandReports of them).
	window [demandReports]window
	used   float64 // units a second admitted, over the same reports (observe); below 0: not known
	over   float64 // the seconds demand was read over
	next   int
	at     time.Time
	share  Share            // what the last split gives it
	sent   float64          // the rate its stream last pushed (sent)
	poke   func(key string) // asks its stream to push its share
}

// window is one report of a member: its requests, those allowed, the
// seconds they cover, and whether its share was split by its demand then.
type window struct {
	n, a, secs float64
	split      bool
}

// demandFresh is how long a report's demand counts: three of Envoy's
// report intervals, so that one lost report does not drop an Envoy.
const demandFresh = 3 * ReportInterval

// moved is how far a member's share may fall below what it was last
// pushed before it is pushed again, grown how far it may rise; both only
// where the move is worth a push (push.go). The shares left as they were
// admit at most moved of a report interval of the limit more than the
// split until their members' next reports.
const (
	moved = 0.02
	grown = 0.10
)

func newFleet(maxKeys int) *fleet {
	return &fleet{keys: make(map[string]*fleetKey), maxKeys: maxKeys}
}

// shape is what the fleet splits of a limit (limitRate).
type shape struct {
	rate, burst float64 // units a second; units held
	// window, for a windowed algorithm, is its window in seconds: the
	// shares' rate leaves room in it for what their buckets hold.
	window float64
}

// demandReports is how many of a member's reports its demand is taken
// over: a rate of a few requests a report reads as whole requests in
// whole seconds (0.3 a second as 1 or 2 in 5 s), and over three reports
// it moves by a sixth rather than by half.
const demandReports = 3

// observe adds a report of n requests, a of them allowed, over secs
// seconds and returns the demand they say, the requests a second of its
// last demandReports reports (or -1 while they cover less than a second:
// a first report), and the seconds they cover. What it admitted a second
// (used) is read over those of the reports whose time it spent on a share
// split by its demand: before, it had an equal share, and what it wasted
// of that says nothing of its bucket (a hundred zipf Envoys from cold had
// their gain steered to its most by their first 5 s).
func (m *member) observe(n, a, secs float64) (float64, float64) {
	m.window[m.next%demandReports] = window{n, a, secs, m.demand >= 0}
	m.next++
	var sum, over, used, split float64
	for _, w := range m.window {
		sum += w.n
		over += w.secs
		if w.split {
			used += w.a
			split += w.secs
		}
	}
	m.used = -1
	if split >= 1 {
		m.used = used / split
	}
	if over < 1 {
		return -1, over
	}
	return sum / over, over
}

// observe records stream's report of n requests over secs seconds on key
// (a limit of shape lim) at now and returns the demand of the key's fresh
// members, the unknown ones guessed: what this server serves of the key.
// ok is false when the fleet is full and key not in it. A demand not
// known yet (a first report) is taken as the least known one (guessOf).
func (f *fleet) observe(key string, stream uint64, n, a, secs float64, lim shape, now time.Time, poke func(string)) (local, handed float64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.keys[key]
	if k == nil {
		if len(f.keys) >= f.maxKeys {
			return 0, 0, false
		}
		k = &fleetKey{members: make(map[uint64]*member)}
		f.keys[key] = k
	}
	me := k.members[stream]
	if me == nil {
		me = &member{poke: poke, demand: -1}
		k.members[stream] = me
	}
	if demand, over := me.observe(n, a, secs); me.demand < 0 || demand < 0 || changed(demand, me.demand, over) {
		me.demand, me.over = demand, over
	}
	me.at = now
	k.lim = lim
	k.dropStale(now)
	k.steer(now)
	return localOf(k.members, lim), k.handed, true
}

// member is key's entry and stream's member in it, each nil when absent.
// f.mu is held.
func (f *fleet) member(key string, stream uint64) (*fleetKey, *member) {
	k := f.keys[key]
	if k == nil {
		return nil, nil
	}
	return k, k.members[stream]
}

// dropStale forgets the members whose demand went stale by now.
func (k *fleetKey) dropStale(now time.Time) {
	for id, m := range k.members {
		if now.Sub(m.at) > demandFresh {
			delete(k.members, id)
		}
	}
}

// localOf is the demand of k's members, the unknown ones guessed.
func localOf(k map[uint64]*member, lim shape) float64 {
	guess, local := guessOf(k, lim), 0.0
	for _, m := range k {
		local += m.demandOr(guess)
	}
	return local
}

// guessOf is the demand taken for k's members not known yet: the least
// known one, since the Envoys that join a fleet late are those asked for
// a key least often (a hundred zipf Envoys from cold admitted 0.88 of an
// exact limiter in their first minute at 1.5× the limit taking the mean,
// 0.90 so); the limit's rate while none is known, so that the first
// Envoys share it equally.
func guessOf(k map[uint64]*member, lim shape) float64 {
	least := -1.0
	for _, m := range k {
		if m.demand >= 0 && (least < 0 || m.demand < least) {
			least = m.demand
		}
	}
	if least < 0 {
		return lim.rate
	}
	return least
}

// share splits lim among key's members at now and returns stream's share
// (the whole limit's when key is not in the fleet), and whether its answer
// is to carry it (push). The other members whose shares are to be pushed
// are poked, outside the lock.
func (f *fleet) share(key string, stream uint64, lim shape, now time.Time) (sh Share, mine bool) {
	f.mu.Lock()
	k, me := f.member(key, stream)
	if me == nil {
		f.mu.Unlock()
		return lim.fit(split(lim.rate, lim.burst, []float64{1})[0], 1), true
	}
	poked, mine := k.split(lim, stream, now)
	sh = me.share
	f.mu.Unlock()
	for _, p := range poked {
		p(key)
	}
	return sh, mine
}

// steady is how far a reported demand may move from the one kept before
// it replaces it: whole-second reports of a steady rate move by a request
// or two (1.5 a second reads as 7 or 8 in 5 s), and each move would move
// the shares and cost every Envoy whose bucket changed up to a token. The
// shares sum to the limit whatever the demands, so this costs a fleet
// nothing, and an Envoy at most steady of its part.
const steady = 0.25

// changed reports whether a demand now read over secs seconds differs from
// the one kept by more than steady and by more than whole-request counts
// vary at the kept rate: a request and a standard deviation of a Poisson
// count (0.3 a second over 15 s is 4.5 requests give or take 2), so that a
// quiet Envoy's 1 or 2 a report does not push it a new bucket, costing it
// up to a token, each time (a hundred zipf Envoys from cold at 1.5× the
// limit, requests evenly spaced, admitted 0.896 of an exact limiter in
// their first minute, 0.911 so).
func changed(now, kept, secs float64) bool {
	expected := kept * secs
	return math.Abs(now-kept)*secs > max(steady*expected, 1+math.Sqrt(expected))
}

// demandOr is m's demand, or guess while it is unknown.
func (m *member) demandOr(guess float64) float64 {
	if m.demand < 0 {
		return guess
	}
	return m.demand
}

// minTokens is the fewest tokens an Envoy's bucket holds: with one, a
// request that comes later than the next token's refill finds the bucket
// full and the refill since lost, and Envoys asked for 1.5 times their
// shares admitted 0.72 of them.
const minTokens = 2

// fit is sh as Envoy takes it, one of n shares: at least minTokens held;
// on a windowed limit, the rate lowered so that what the n buckets hold
// and a window's refill together stay within the window's limit (at
// least half the rate is kept: a limit too small for its Envoys' buckets
// overshoots by them, as documented).
func (lim shape) fit(sh Share, n int) Share {
	sh.Burst = max(sh.Burst, minTokens)
	if lim.window > 0 && lim.rate > 0 {
		perWindow := lim.rate * lim.window
		held := max(lim.burst, float64(n)*minTokens)
		sh.Rate *= max(0.5, (perWindow-held)/perWindow)
	}
	return sh
}

// sent notes that stream pushed a share of rate on key.
func (f *fleet) sent(key string, stream uint64, rate float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, m := f.member(key, stream); m != nil {
		m.sent = rate
	}
}

// shareOf is stream's share on key now, as the last split left it.
func (f *fleet) shareOf(key string, stream uint64) (Share, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, m := f.member(key, stream); m != nil {
		return m.share, true
	}
	return Share{}, false
}

// leave forgets stream's demand on key (the bucket was abandoned, or the
// stream ended); the others' shares grow at their next reports.
func (f *fleet) leave(key string, stream uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.keys[key]; k != nil {
		delete(k.members, stream)
		if len(k.members) == 0 {
			delete(f.keys, key)
		}
	}
}

// served is one key this server serves: its limit and the demand of its
// members here (observe).
type served struct {
	key           string
	lim           shape
	local, handed float64
}

// served lists the keys with members, dropping the members gone stale by
// now (and the keys left without); with list false it only drops them.
func (f *fleet) served(now time.Time, list bool) []served {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []served
	if list {
		out = make([]served, 0, len(f.keys))
	}
	for key, k := range f.keys {
		k.dropStale(now)
		if len(k.members) == 0 {
			delete(f.keys, key)
			continue
		}
		if list {
			out = append(out, served{key, k.lim, localOf(k.members, k.lim), k.handed})
		}
	}
	return out
}

// resplit splits lim among key's members again and pokes every member
// whose share moved (moved, grown): the other replicas' demand changed.
func (f *fleet) resplit(key string, lim shape, now time.Time) {
	f.mu.Lock()
	var poked []func(string)
	if k := f.keys[key]; k != nil && len(k.members) > 0 {
		poked, _ = k.split(lim, 0, now) // stream ids start at 1
	}
	f.mu.Unlock()
	for _, p := range poked {
		p(key)
	}
}

// len is the keys held.
func (f *fleet) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}
