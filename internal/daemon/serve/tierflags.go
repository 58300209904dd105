package serve

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/localbucket"
	"github.com/sluicehq/sluice/pkg/localtier"
	"github.com/sluicehq/sluice/pkg/share"
)

// TierFlags are the local tier's settings (pkg/localtier) under the same
// names in both daemons: the sidecar's, and the server's in cached Redis
// mode.
type TierFlags struct {
	Fraction        float64
	FlushInterval   time.Duration
	LooseHold       time.Duration
	BatchSize       int
	MaxPending      int
	MaxPendingBytes int64
	MaxKeys         int
}

// Register adds the flags to fs.
func (f *TierFlags) Register(fs *flag.FlagSet) {
	fs.Float64Var(&f.Fraction, "local-fraction", localtier.DefaultFraction, "share of each limit the local bucket allows, in (0, 1]; 1 never rejects what the global limit admits")
	fs.DurationVar(&f.FlushInterval, "flush-interval", localtier.DefaultFlushInterval, "batched hits (localfilter -mode async, server -redis-mode cached): how often admitted hits are recorded in the global limit")
	fs.DurationVar(&f.LooseHold, "loose-hold", localtier.DefaultLooseHold, "batched hits: how long the hits of a key far from its limit may wait before they are recorded, within the units the server's answers allow (1/16 of what the key has left, shared by demand); 0 records every key every -flush-interval")
	fs.IntVar(&f.BatchSize, "batch-size", localtier.DefaultBatchSize, "batched hits: record early once this many keys have hits pending")
	fs.IntVar(&f.MaxPending, "max-pending", localtier.DefaultMaxPending, "keys with admitted hits not yet recorded in the global limit (batched, and while it is unavailable); beyond, hits are dropped and counted")
	fs.Int64Var(&f.MaxPendingBytes, "max-pending-bytes", localtier.DefaultMaxPendingBytes, "bytes those keys may hold (long values are held by digest); beyond, hits are dropped and counted")
	fs.IntVar(&f.MaxKeys, "local-max-keys", localbucket.DefaultMaxKeys, "keys the local buckets hold, at most localbucket.KeyOverhead (128) bytes each beyond the key; idle ones are reclaimed first and dropped once a second")
}

// Validate reports what is wrong with the flags.
func (f *TierFlags) Validate() error {
	var errs []error
	if !(f.Fraction > 0 && f.Fraction <= 1) {
		errs = append(errs, errors.New("-local-fraction must be in (0, 1]"))
	}
	if f.LooseHold < 0 || f.LooseHold > share.MaxHold {
		errs = append(errs, fmt.Errorf("-loose-hold must be within [0, %s]", share.MaxHold))
	}
	if f.FlushInterval <= 0 || f.BatchSize <= 0 || f.MaxPending <= 0 || f.MaxPendingBytes <= 0 || f.MaxKeys <= 0 {
		errs = append(errs, errors.New("-flush-interval, -batch-size, -max-pending, -max-pending-bytes and -local-max-keys must be positive"))
	}
	return errors.Join(errs...)
}

// Options are the tier's options the flags set.
func (f *TierFlags) Options() localtier.Options {
	return localtier.Options{
		Fraction: f.Fraction, FlushInterval: f.FlushInterval, LooseHold: looseHold(f.LooseHold), BatchSize: f.BatchSize,
		MaxPending: f.MaxPending, MaxPendingBytes: f.MaxPendingBytes, MaxKeys: f.MaxKeys,
	}
}

// looseHold is the tier's LooseHold for the flag's d: 0, none, is the
// tier's -1.
func looseHold(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
