package global

import (
	"context"
	"crypto/rand"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicas counts the processes that share one Redis in the same role (the
// servers in cached mode, whose local tiers each take shares of the same
// limits): each says it is alive every second in one sorted set, scored by
// when that word lapses, and reads how many others did. One process's
// count is its own guess: a replica that died is counted until its word
// lapses (ReplicaLapse), one that just started after the next beat.
//
// Replicas are safe for concurrent use; Run beats until its context ends.
type Replicas struct {
	c     ReplicaClient
	key   string
	id    string
	count atomic.Int64
}

// ReplicaClient is what Replicas needs of a go-redis client (any kind:
// the set is one key). It is used from Run's goroutine and must be safe
// for concurrent use, as go-redis clients are.
type ReplicaClient interface {
	redis.Scripter
}

// ReplicaLapse is how long a replica's word counts: three beats.
const ReplicaLapse = 3 * time.Second

// NewReplicas counts the replicas whose set is key, this one among them.
func NewReplicas(c ReplicaClient, key string) *Replicas {
	r := &Replicas{c: c, key: key, id: rand.Text()}
	r.count.Store(1)
	return r
}

// beatLua adds ARGV[1] to the set KEYS[1] until ARGV[2] µs from Redis's
// now, drops the lapsed, and returns how many are left.
var beatLua = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) / 1000))
return redis.call('ZCARD', KEYS[1])
`)

// Beat says this replica is alive and reads the count.
func (r *Replicas) Beat(ctx context.Context) error {
	n, err := beatLua.Run(ctx, r.c, []string{r.key}, r.id, ReplicaLapse.Microseconds()).Int64()
	if err != nil {
		return err
	}
	r.count.Store(max(1, n))
	return nil
}

// Run beats every second until ctx is done; a failed beat keeps the last
// count (Redis away: the count matters only when it answers).
func (r *Replicas) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, time.Second)
		r.Beat(bctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Count is how many replicas share the set, at least 1.
func (r *Replicas) Count() int { return int(r.count.Load()) }
