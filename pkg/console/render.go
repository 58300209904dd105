package console

import (
	"context"
	"errors"
	"sync"
	"time"
)

// MaxAge is how long one rendering of an admin view is served to every
// viewer who asks for it, so that the views' cost does not grow with
// their viewers: at most one rendering of each per MaxAge. The page
// refreshes every Refresh; what it shows is at most MaxAge older than it
// would be rendered afresh.
const MaxAge = Refresh / 4

// MaxRenderings bounds the renderings a Renderings keeps at once.
const MaxRenderings = 8

// Renderings shares rendered views between viewers: the rendering of a
// key is served to every request for it for MaxAge, requests arriving
// while it is being rendered wait for it, renderings run one at a time
// (whatever their key), and at most MaxRenderings are kept. A rendering
// that fails is served to those who waited for it and to no one after.
//
// It is safe for concurrent use. Make one with NewRenderings.
type Renderings struct {
	now  func() time.Time
	turn chan struct{} // holds a token while a rendering runs
	mu   sync.Mutex
	kept map[string]*rendering
}

// rendering is one key's rendering; done is closed once body and err (or
// abandoned) are set.
type rendering struct {
	at        time.Time
	done      chan struct{}
	body      []byte
	err       error
	abandoned bool // its renderer left before its turn: wait for another
}

// NewRenderings returns an empty Renderings on the clock now (time.Now if
// nil).
func NewRenderings(now func() time.Time) *Renderings {
	if now == nil {
		now = time.Now
	}
	return &Renderings{now: now, turn: make(chan struct{}, 1), kept: map[string]*rendering{}}
}

// Get returns key's rendering: the one kept if it is younger than MaxAge
// or still being rendered, else render's, called once no other rendering
// runs. It returns ctx's error if ctx ends while it waits. The body
// returned is shared: it must not be modified.
func (r *Renderings) Get(ctx context.Context, key string, render func() ([]byte, error)) ([]byte, error) {
	for {
		now := r.now()
		r.mu.Lock()
		g := r.kept[key]
		if g != nil && (!closed(g.done) || now.Sub(g.at) < MaxAge) {
			r.mu.Unlock()
			select {
			case <-g.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if g.abandoned {
				continue
			}
			return g.body, g.err
		}
		g = &rendering{at: now, done: make(chan struct{})}
		r.keep(key, g, now)
		r.mu.Unlock()
		select {
		case r.turn <- struct{}{}:
		case <-ctx.Done():
			r.forget(key, g)
			g.abandoned = true
			close(g.done)
			return nil, ctx.Err()
		}
		r.run(key, g, render)
		return g.body, g.err
	}
}

// errPanicked is the error of a rendering that panicked.
var errPanicked = errors.New("console: the rendering panicked")

// run renders g in its turn, which the caller holds, and gives the turn
// back even if render panics.
func (r *Renderings) run(key string, g *rendering, render func() ([]byte, error)) {
	defer func() {
		<-r.turn
		if g.err != nil {
			r.forget(key, g)
		}
		close(g.done)
	}()
	g.err = errPanicked
	g.body, g.err = render()
}

// Len is how many renderings are kept.
func (r *Renderings) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.kept)
}

// keep keeps g as key's rendering, making room if MaxRenderings are kept:
// stale ones go first, then the oldest finished. With every one kept
// still being rendered, g is rendered without being kept. The caller
// holds mu.
func (r *Renderings) keep(key string, g *rendering, now time.Time) {
	delete(r.kept, key)
	if len(r.kept) >= MaxRenderings {
		var oldest string
		for k, o := range r.kept {
			if !closed(o.done) {
				continue
			}
			if now.Sub(o.at) >= MaxAge {
				delete(r.kept, k)
			} else if oldest == "" || o.at.Before(r.kept[oldest].at) {
				oldest = k
			}
		}
		if len(r.kept) >= MaxRenderings && oldest != "" {
			delete(r.kept, oldest)
		}
	}
	if len(r.kept) < MaxRenderings {
		r.kept[key] = g
	}
}

// forget drops key's rendering if it is still g.
func (r *Renderings) forget(key string, g *rendering) {
	r.mu.Lock()
	if r.kept[key] == g {
		delete(r.kept, key)
	}
	r.mu.Unlock()
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
