package global

import (
	"context"
	"crypto/rand"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetDemand is what the server replicas sharing one Redis serve of each
// key of Envoy's rate limit quota service (pkg/rlqs): each says, at every
// report on a key, the demand its own Envoys report on it, and reads the
// others'. Each replica's word lapses after the time it gives, so a
// replica that died stops counting. One hash a key, a field a replica.
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
// ARGV[2] until ARGV[3] µs from Redis's now, drops the lapsed fields,
// keeps the hash as long as its last word, and returns the others' demand
// summed, as a string (a float).
var fleetLua = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + ttl))
local all = redis.call('HGETALL', KEYS[1])
local others, last = 0, now + ttl
for i = 1, #all, 2 do
  local d, lapse = string.match(all[i + 1], '^(%S+) (%S+)$')
  if not lapse or tonumber(lapse) < now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    last = math.max(last, tonumber(lapse))
    if all[i] ~= ARGV[1] then
      others = others + tonumber(d)
    end
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil((last - now) / 1000))
return tostring(others)
`)

// Demand says this replica serves mine units a second on key, for ttl,
// and returns what the other replicas said they serve.
func (f *FleetDemand) Demand(ctx context.Context, key string, mine float64, ttl time.Duration) (float64, error) {
	s, err := fleetLua.Run(ctx, f.c, []string{f.prefix + key}, f.id, strconv.FormatFloat(mine, 'g', 8, 64), ttl.Microseconds()).Text()
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}
