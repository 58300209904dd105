package httplimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// Leases are concurrency slots a request holds while it runs:
// global.Leases, on a Redis store (shared by every replica) or a memory
// one, the same concurrency limits Envoy's in-flight descriptors count.
//
// They are called from every request's goroutine: an implementation must
// be safe for concurrent use (global.Leases is).
type Leases interface {
	Acquire(ctx context.Context, key, id string, limit int64, ttl time.Duration) (ok bool, held int64, retry time.Duration, err error)
	Release(ctx context.Context, key, id string, limit int64, ttl time.Duration) error
}

// ConcurrencyOptions configure a concurrency limit. Leases, Key, Limit and
// Name are required. Concurrency copies them; what they name is used from
// every request's goroutine and must be safe for concurrent use.
type ConcurrencyOptions struct {
	Leases Leases
	// Key names whose slots a request takes (a client, a tenant); a request
	// it gives none for is not limited.
	Key Source
	// Limit is how many requests of one key may run at once.
	Limit int64
	// TTL bounds how long a slot is held if its request never releases it
	// (a crashed process): it should be longer than the slowest request.
	// Default 1 minute.
	TTL time.Duration
	// Name identifies the limit: its slots in the store are those of
	// (Name, the Key's value), and no other pair's, and it names the limit
	// in X-RateLimit-Reason and the log. Required: printable UTF-8 (no
	// control, format or invisible characters), at most
	// maxConcurrencyName (64) bytes. There is no default: two limits left
	// at one default would share their slots ("alice" the tenant holding
	// the slots of "alice" the user). Two middlewares with the same Name
	// on one store (or on one Redis) are one limit, the way the replicas of
	// a service share theirs; each distinct limit needs a Name of its own.
	Name string
	// Logger gets the store's failures, on which requests are served (a
	// limiter that errors fails open). Default: discard.
	Logger *slog.Logger
}

// Concurrency returns middleware that lets at most Limit requests of a key
// run at once: each takes a slot before the handler runs and gives it back
// when the handler returns; one that finds none gets 429 with a
// Retry-After of when the first slot frees at the latest. Envoy cannot
// release a slot (its rate limit filter calls once per request), so this
// limit lives in the service itself.
//
// A limit's slots are keyed by its Name and the request's Key value alone
// (see ConcurrencyOptions.Name): it refuses to start without a Name of its
// own, so no two limits share slots unless they are given the same Name.
func Concurrency(o ConcurrencyOptions) (func(http.Handler) http.Handler, error) {
	if o.Leases == nil || o.Key == nil || o.Limit < 1 {
		return nil, errors.New("httplimit: ConcurrencyOptions need Leases, Key and a Limit of at least 1")
	}
	if err := checkConcurrencyName(o.Name); err != nil {
		return nil, err
	}
	if o.TTL <= 0 {
		o.TTL = time.Minute
	}
	if o.Limit > algorithm.MaxConcurrencyLimit || o.TTL < time.Millisecond || o.TTL > maxConcurrencyTTL {
		return nil, fmt.Errorf("httplimit: concurrency limit %d, TTL %v: want a limit of at most %d and a TTL of 1ms to %v", o.Limit, o.TTL, algorithm.MaxConcurrencyLimit, maxConcurrencyTTL)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, ok := o.Key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			key, id := leaseKey(o.Name, k), rand.Text()
			got, _, retry, err := o.Leases.Acquire(r.Context(), key, id, o.Limit, o.TTL)
			if err != nil {
				o.Logger.Warn("concurrency limit unavailable; serving", "limit", o.Name, "error", err.Error())
				next.ServeHTTP(w, r)
				return
			}
			if !got {
				w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retry.Seconds()))), 10))
				w.Header().Set("X-RateLimit-Reason", fmt.Sprintf("%s: %d requests at once", o.Name, o.Limit))
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, "%s\n", http.StatusText(http.StatusTooManyRequests))
				return
			}
			defer func() {
				// Released even when the client went away, within a bound.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
				defer cancel()
				if err := o.Leases.Release(ctx, key, id, o.Limit, o.TTL); err != nil {
					o.Logger.Warn("concurrency slot not released; it frees at its TTL", "limit", o.Name, "error", err.Error())
				}
			}()
			next.ServeHTTP(w, r)
		})
	}, nil
}

// maxConcurrencyTTL bounds ConcurrencyOptions.TTL: a slot held longer is
// a holder gone, not a request running.
const maxConcurrencyTTL = 24 * time.Hour

// maxConcurrencyName bounds ConcurrencyOptions.Name, in bytes: it is sent
// in a header and logged with every failure.
const maxConcurrencyName = 64

func checkConcurrencyName(name string) error {
	if name == "" || len(name) > maxConcurrencyName {
		return fmt.Errorf("httplimit: a concurrency limit needs a Name of 1 to %d bytes, its own (it is the limit's key space in the store)", maxConcurrencyName)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return fmt.Errorf("httplimit: concurrency limit Name %q: printable characters only", name)
		}
	}
	return nil
}

// leaseKeyPrefix starts every concurrency limit's lease key.
const leaseKeyPrefix = "sluice:lease:"

// leaseKey is the store key of the slots of (name, value): limiter.Key's
// length-prefixed digest, so no other pair shares it, whatever separators
// either holds, a value cannot move its Cluster hash tag, and it has the
// same 47 bytes however long the value.
func leaseKey(name, value string) string {
	return limiter.Key(leaseKeyPrefix, name, value)
}
