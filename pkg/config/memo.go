package config

import (
	"sync"
	"sync/atomic"
)

// LimitMemo remembers a value derived from each Limit of the current
// Config snapshot (a reply's text, a protobuf message), so that the
// request path derives it once per config instead of once per request.
// Only the latest snapshot's values are kept: a reload starts afresh, and
// the values of old snapshots go with them.
//
// The zero value is ready. A LimitMemo is safe for concurrent use; the
// values it hands out are shared, and must be treated as read only.
type LimitMemo[T any] struct {
	p atomic.Pointer[snapshotMemo]
}

// snapshotMemo is the values of one snapshot's limits.
type snapshotMemo struct {
	cfg *Config
	m   sync.Map // *Limit → T
}

// Get returns derive(l), derived once for cfg's snapshot. l must be one of
// cfg's limits: a limit made for one request (an override) would be kept
// until the next reload, so derive it directly instead. With a nil cfg, or
// while snapshots are changing under it, Get derives afresh.
func (c *LimitMemo[T]) Get(cfg *Config, l *Limit, derive func(*Limit) T) T {
	if cfg == nil {
		return derive(l)
	}
	memo := c.p.Load()
	if memo == nil || memo.cfg != cfg {
		fresh := &snapshotMemo{cfg: cfg}
		if c.p.CompareAndSwap(memo, fresh) {
			memo = fresh
		} else if memo = c.p.Load(); memo.cfg != cfg {
			return derive(l) // snapshots changing under us: rare, and still right
		}
	}
	if v, ok := memo.m.Load(l); ok {
		return v.(T)
	}
	v, _ := memo.m.LoadOrStore(l, derive(l))
	return v.(T)
}
