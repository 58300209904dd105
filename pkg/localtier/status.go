package localtier

import (
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/breaker"
	"github.com/sluicehq/sluice/pkg/console"
)

// flushed is what the last flush that sent hits did.
type flushed struct {
	mu     sync.Mutex
	at     time.Time
	took   time.Duration
	keys   int
	failed bool
}

func (f *flushed) set(at time.Time, took time.Duration, keys int, failed bool) {
	f.mu.Lock()
	f.at, f.took, f.keys, f.failed = at, took, keys, failed
	f.mu.Unlock()
}

func (f *flushed) get() (at time.Time, took time.Duration, keys int, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at, f.took, f.keys, f.failed
}

// Status describes the tier for an admin page: the upstream's state as
// its breaker sees it, the mode, and what the tier holds.
func (t *Tier) Status() console.Section {
	now := t.opts.Now()
	up := console.Field{Name: "upstream"}
	switch t.br.State() {
	case breaker.Closed:
		up.Value = "answering (breaker closed)"
	case breaker.HalfOpen:
		up.Value, up.Alert = "unavailable, being probed (breaker half-open); deciding locally at the fallback share", true
	default:
		up.Value, up.Alert = "unavailable (breaker open); deciding locally at the fallback share", true
	}
	fields := []console.Field{
		up,
		{Name: "mode", Value: t.opts.Mode.String()},
		{Name: "local fraction", Value: strconv.FormatFloat(t.opts.Fraction, 'g', -1, 64)},
		{Name: "fallback share", Value: strconv.FormatFloat(t.opts.FallbackShare, 'g', -1, 64)},
		{Name: "local bucket keys", Value: strconv.Itoa(t.local.Len())},
		{Name: "allowance keys", Value: strconv.FormatInt(int64(t.allow.len()), 10)},
	}
	if t.opts.Mode == Async {
		fields = append(fields,
			console.Field{Name: "pending keys", Value: strconv.FormatInt(t.pending.keys.Load(), 10)},
			console.Field{Name: "flush every", Value: t.opts.FlushInterval.String()})
		at, took, keys, failed := t.lastFlush.get()
		last := console.Field{Name: "last flush", Value: "none yet"}
		if !at.IsZero() {
			last.Value = now.Sub(at).Round(time.Millisecond).String() + " ago, took " + took.Round(time.Microsecond).String() + ", keys: " + strconv.Itoa(keys)
			if failed {
				last.Value += ", failed (kept pending)"
				last.Alert = true
			}
		}
		fields = append(fields, last)
	}
	return console.Section{Title: "Local tier", Fields: fields}
}
