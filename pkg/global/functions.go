package global

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The decide script as a Redis 7 function (decideLibrary): FCALL runs the
// driver alone, where EVALSHA defines every helper and algorithm again on
// each call. A store starts calling the function; the first call that
// finds it missing (a fresh Redis, a failover to a node never given it, a
// new Cluster shard, FUNCTION FLUSH) is sent again as EVAL, as a missing
// script is (NOSCRIPT), and the library is loaded for the calls after.
// Where functions cannot be had (Redis 6, a managed Redis or an ACL that
// refuses FUNCTION), the store goes on with scripts alone.

// functions is a store's state of the function: whether it calls it,
// and its library.
type functions struct {
	name, src string
	// off: the store calls the script (EVALSHA) from now on.
	off atomic.Bool
	// loading: a load is under way; the others wait for the next miss.
	loading atomic.Bool
}

func newFunctions() *functions {
	src, name := decideLibrary()
	return &functions{name: name, src: src}
}

// missing reports whether err says the function is not there to call: not
// loaded, or FCALL unknown to this server.
func functionMissing(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found") || redis.HasErrorPrefix(err, "unknown command")
}

// functionLoader is what loading the library needs of a client; both
// go-redis clients have it, and a Cluster client ForEachMaster too.
type functionLoader interface {
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
}

// load loads the library into client (every master of a Cluster), after a
// call found it missing; one load at a time, within 5 s. A server that refuses FUNCTION LOAD (too old,
// or not allowed) turns the function off for good: the store calls the
// script from then on.
func (f *functions) load(client Scripter) {
	if !f.loading.CompareAndSwap(false, true) {
		return
	}
	defer f.loading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	one := func(ctx context.Context, c functionLoader) error {
		err := c.FunctionLoad(ctx, f.src).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil // another server of this version loaded it
		}
		return err
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	case functionLoader:
		err = one(ctx, c)
	default:
		f.off.Store(true) // a client that cannot load it
		return
	}
	var rerr redis.Error
	if err != nil && errors.As(err, &rerr) {
		f.off.Store(true) // Redis refused it: scripts only
	}
}

// Load puts the scripts into Redis's script cache, and the decide
// function into its libraries, ahead of the first request (on a Cluster,
// on every master). It is an optimisation: a call that meets an empty
// cache, or no function, falls back to EVAL.
func (r *Redis) Load(ctx context.Context) error {
	for _, src := range []string{decideSource(), refundSource()} {
		if err := r.client.ScriptLoad(ctx, src).Err(); err != nil {
			return fmt.Errorf("redis store: load script: %w", err)
		}
	}
	if !r.fn.off.Load() {
		r.fn.load(r.client) // where Redis refuses it, the scripts serve
	}
	return nil
}
