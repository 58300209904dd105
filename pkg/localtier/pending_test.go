package localtier

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDrainKeepsTheHeldSendsTheRest: a drain keeps the keys within their
// holds and sends the others, those that went past their hold in units,
// were refused or refunded since, have no hold, or whose hold ran out,
// and only those.
func TestDrainKeepsTheHeldSendsTheRest(t *testing.T) {
	const hold = 100
	p := newPending(100_000, 1<<30, func(key string) float64 {
		if key == "none" {
			return 0
		}
		return hold
	}, time.Second)
	describe := func() hits { return hits{domain: "d", memory: int64(time.Hour)} }
	for i := range 1000 {
		p.add(fmt.Sprint("k", i), 1, 1, 0, 0, 0, describe)
	}
	keys := func(es []entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.key)
		}
		slices.Sort(out)
		return out
	}
	if got := p.drain(nil, 1, false); len(got) != 0 || p.kept.Load() != 1000 {
		t.Fatalf("all held: sent %v, kept %d; want none, 1000", keys(got), p.kept.Load())
	}
	p.add("k1", hold, hold, 0, 2, 2, describe) // past the hold
	p.add("k2", 0, 1, 0, 2, 2, describe)       // refused
	p.add("k3", 0, 0, 1, 2, 2, describe)       // refunded
	p.add("none", 1, 1, 0, 2, 2, describe)     // no hold
	if got, want := keys(p.drain(nil, 3, false)), []string{"k1", "k2", "k3", "none"}; !slices.Equal(got, want) || p.kept.Load() != 997 {
		t.Fatalf("sent %v, kept %d; want %v, 997", got, p.kept.Load(), want)
	}
	if got := p.drain(nil, int64(time.Second)-1, false); len(got) != 0 {
		t.Fatalf("a nanosecond before the holds end: sent %d keys", len(got))
	}
	if got := p.drain(nil, int64(time.Second), false); len(got) != 997 || p.kept.Load() != 0 || p.keys.Load() != 0 {
		t.Fatalf("at the holds' end: sent %d, kept %d, %d pending; want 997, 0, 0", len(got), p.kept.Load(), p.keys.Load())
	}
}

// TestDrainAsAScanOfEveryKey: in random adds and drains the keys a drain
// sends, and their hits, are those a scan of every pending key would send
// (the rule in drain, with no shard passed over).
func TestDrainAsAScanOfEveryKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	holds, memories := map[string]float64{}, map[string]int64{}
	p := newPending(100_000, 1<<30, func(key string) float64 { return holds[key] }, time.Second)
	model := map[string]hits{}
	now := int64(0)
	for range 20_000 {
		now += rng.Int64N(int64(20 * time.Millisecond))
		if rng.IntN(15) == 0 {
			all := rng.IntN(10) == 0
			got := map[string]hits{}
			for _, e := range p.drain(nil, now, all) {
				got[e.key] = e.hits
			}
			want := map[string]hits{}
			for k, h := range model {
				if all || !(h.holds() && now < h.holdUntil) {
					want[k] = h
					delete(model, k)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("at %v: sent %d keys, want %d", now, len(got), len(want))
			}
			for k, h := range want {
				if g, ok := got[k]; !ok || g.n != h.n || g.asked != h.asked || g.refund != h.refund {
					t.Fatalf("at %v: key %s sent as %+v (sent: %v), want %+v", now, k, g, ok, h)
				}
			}
			continue
		}
		key := fmt.Sprint("k", rng.IntN(40))
		if _, ok := holds[key]; !ok {
			holds[key] = float64(rng.IntN(3) * 20) // none, 20 or 40
			memories[key] = int64(time.Duration(1+rng.IntN(4)) * time.Second)
		}
		n := uint64(rng.IntN(4))
		asked, refund := n, uint64(0)
		switch rng.IntN(20) {
		case 0:
			asked++ // refused one
		case 1:
			refund = 1
		}
		describe := func() hits { return hits{domain: "d", memory: memories[key]} }
		if _, ok := p.add(key, n, asked, refund, now, now, describe); !ok {
			t.Fatal("no room")
		}
		h, ok := model[key]
		if !ok {
			h = hits{hold: holds[key]}
			if h.hold > 0 {
				h.holdUntil = (now + min(int64(time.Second), memories[key]/2)) / holdTick * holdTick
			}
		}
		h.n, h.asked, h.refund = h.n+n, h.asked+asked, h.refund+refund
		model[key] = h
	}
}
