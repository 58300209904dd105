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
// a key, a field a replica.
//
// Safe for concurrent use.
type FleetDemand struct {
	c      ReplicaClient
	prefix string
	id     string
}

// NewFleetDemand keeps the words under prefix on c.
func NewFleetDemand(c ReplicaClient, prefix string) *FleetDemand {
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

// Demand says this replica's Envoys ask for mine units a second of key and
// hold handed of its rate, for ttl, and returns what the other replicas
// said of theirs.
func (f *FleetDemand) Demand(ctx context.Context, key string, mine, handed float64, ttl time.Duration) (others, othersHanded float64, err error) {
	v, err := fleetLua.Run(ctx, f.c, []string{f.prefix + key}, f.id, strconv.FormatFloat(mine, 'g', 8, 64),
		strconv.FormatFloat(handed, 'g', 8, 64), ttl.Microseconds()).StringSlice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("fleet demand: %d values; want 2", len(v))
	}
	if others, err = strconv.ParseFloat(v[0], 64); err != nil {
		return 0, 0, err
	}
	othersHanded, err = strconv.ParseFloat(v[1], 64)
	return others, othersHanded, err
}
