package global

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetDemand is what the server replicas sharing one Redis serve of each
// key of Envoy's rate limit quota service (pkg/rlqs): each says, at every
// report on a key, the demand its own Envoys report on it and the rate it
// has handed them, and reads the others'. Each replica's word lapses
// after the time it gives (its assignments' lifetime), so a replica that
// died stops counting once its Envoys' assignments have run out. One hash
// a key, a field a replica; the words of many keys go in pipelines of
// fleetBatch.
//
// Safe for concurrent use.
type FleetDemand struct {
	c      FleetClient
	prefix string
	id     string
}

// FleetClient is what FleetDemand needs of a go-redis client (any kind:
// on a Cluster the pipelines are split by slot). It must be safe for
// concurrent use, as go-redis clients are.
type FleetClient interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// FleetWord is one key's word: this replica's demand and rate handed out,
// and the others' summed, which Demand fills in. A plain value, safe to
// share between goroutines.
type FleetWord struct {
	Key                  string
	Mine, Handed         float64
	Others, OthersHanded float64
}

// fleetBatch is the most words one pipeline carries: a report of 10,000
// buckets goes in ten round trips, not 10,000.
const fleetBatch = 1000

// NewFleetDemand keeps the words under prefix on c.
func NewFleetDemand(c FleetClient, prefix string) *FleetDemand {
	return &FleetDemand{c: c, prefix: prefix, id: rand.Text()}
}

// fleetLua sets this replica's field of KEYS[1] (ARGV[1]) to its demand
// ARGV[2] and rate handed out ARGV[3] until ARGV[4] µs from Redis's now,
// drops the lapsed fields, keeps the hash as long as its last word, and
// returns the others' demand and rate summed, as strings (floats).
var fleetLua = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. (now + ttl))
local all = redis.call('HGETALL', KEYS[1])
local demand, handed, last = 0, 0, now + ttl
for i = 1, #all, 2 do
  local d, h, lapse = string.match(all[i + 1], '^(%S+) (%S+) (%S+)$')
  if not lapse or tonumber(lapse) < now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    last = math.max(last, tonumber(lapse))
    if all[i] ~= ARGV[1] then
      demand = demand + tonumber(d)
      handed = handed + tonumber(h)
    end
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil((last - now) / 1000))
return {tostring(demand), tostring(handed)}
`)

// Demand says, of each word's key, that this replica's Envoys ask for
// Mine units a second and hold Handed of its rate, for ttl, and fills in
// what the other replicas said of theirs. A script Redis does not hold
// (restarted, flushed, a new Cluster shard) is sent whole.
func (f *FleetDemand) Demand(ctx context.Context, ttl time.Duration, words []FleetWord) error {
	for start := 0; start < len(words); start += fleetBatch {
		if err := f.demand(ctx, ttl, words[start:min(start+fleetBatch, len(words))]); err != nil {
			return err
		}
	}
	return nil
}

func (f *FleetDemand) demand(ctx context.Context, ttl time.Duration, words []FleetWord) error {
	cmds := make([]*redis.Cmd, len(words))
	// EVALSHA each word, then EVAL those whose script Redis did not hold;
	// each command's error is read below (Pipelined's is the first of them).
	send := func(whole bool, which []int) {
		_, _ = f.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range which {
				keys := []string{f.prefix + words[i].Key}
				args := []any{f.id, strconv.FormatFloat(words[i].Mine, 'g', 8, 64), strconv.FormatFloat(words[i].Handed, 'g', 8, 64), ttl.Microseconds()}
				if whole {
					cmds[i] = fleetLua.Eval(ctx, p, keys, args...)
				} else {
					cmds[i] = fleetLua.EvalSha(ctx, p, keys, args...)
				}
			}
			return nil
		})
	}
	all := make([]int, len(words))
	for i := range all {
		all[i] = i
	}
	send(false, all)
	var missing []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		send(true, missing)
	}
	for i, c := range cmds {
		v, err := c.StringSlice()
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("fleet demand: %d values; want 2", len(v))
		}
		if words[i].Others, err = strconv.ParseFloat(v[0], 64); err != nil {
			return err
		}
		if words[i].OthersHanded, err = strconv.ParseFloat(v[1], 64); err != nil {
			return err
		}
	}
	return nil
}
