package algorithm

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// Slot is one unit of a concurrency limit held: Member holds it since T
// (µs). A holder taking n units holds n members, named by SlotMember.
//
// A plain value, safe to copy and to read from many goroutines.
type Slot struct {
	Member string
	T      int64
}

// concurrency counts the units held at once, not the units taken over
// time: a request takes cost units for its holder (Params.Holder, the
// request's own id) and a refund (GiveBack) of the same holder frees them;
// nothing refills with time. Each unit is held for at most one Window, the
// slot's TTL, so a holder that dies without its refund frees its units
// within the TTL. Params.Limit units are held at most.
//
// The holder is what makes a refund exact: it frees that holder's units
// and no one else's, so a late refund (its units expired already) and the
// stream-end refund of a request refused at its start (it took nothing)
// free nothing. Without a holder no rule could be right: a refund could be
// any holder's, and freeing the oldest unit keeps a dead holder's unit
// alive while others come and go, freeing the newest lets a unit expire
// under a live holder, so the count falls below the truth.
//
// A holder that takes again holds more units (each take is a request's).
// Slots are oldest first; their times never decrease.
func concurrency(s State, p Params, now, cost int64, mode Mode) (State, Result) {
	slots := liveSlots(s.Slots, p, &now)
	n := need(cost)
	count := int64(len(slots))
	allowed := count+n <= p.Limit
	var retry int64
	if !allowed {
		if n > p.Limit {
			retry = p.Window
		} else {
			// The oldest k units must expire: wait for the k-th.
			retry = slots[count+n-p.Limit-1].T + p.Window - now
		}
	}
	if (allowed || mode != Take) && cost > 0 {
		slots = takeSlots(slots, p.Holder, now, min(cost, p.Limit+maxDebt(p.Limit, p.Limit)-count))
		count = int64(len(slots))
	}
	r := Result{Allowed: allowed, Remaining: max(0, p.Limit-count), RetryAfter: retry}
	r.Left = float64(r.Remaining)
	if count > 0 {
		r.ResetAfter = slots[len(slots)-1].T + p.Window - now
	}
	return State{Exists: count > 0, Slots: slots}, r
}

// liveSlots drops the slots whose TTL has passed at now; a clock that went
// back is taken to be at the newest slot's time (*now is moved there).
func liveSlots(slots []Slot, p Params, now *int64) []Slot {
	if k := len(slots); k > 0 && slots[k-1].T > *now {
		*now = slots[k-1].T
	}
	return slots[sort.Search(len(slots), func(i int) bool { return slots[i].T > *now-p.Window }):]
}

// takeSlots adds n units of holder at now, named by the first unit
// numbers the holder does not hold. It never writes to an element of
// slots: it copies them.
func takeSlots(slots []Slot, holder string, now, n int64) []Slot {
	if n <= 0 {
		return slots
	}
	out := make([]Slot, len(slots), len(slots)+int(n))
	copy(out, slots)
	used := map[int64]bool{}
	for i := range slots {
		if k, ok := memberUnit(slots[i].Member, holder); ok {
			used[k] = true
		}
	}
	for k := int64(1); n > 0; k++ {
		if !used[k] {
			out = append(out, Slot{Member: SlotMember(holder, k), T: now})
			n--
		}
	}
	return out
}

// dropUnits returns slots without up to cost of holder's units whose time
// is `at` (any time when at < 0), the newest first. It copies.
func dropUnits(slots []Slot, holder string, cost, at int64) []Slot {
	drop := map[int]bool{}
	for i := len(slots) - 1; i >= 0 && int64(len(drop)) < cost; i-- {
		if _, ok := memberUnit(slots[i].Member, holder); ok && (at < 0 || slots[i].T == at) {
			drop[i] = true
		}
	}
	out := make([]Slot, 0, len(slots)-len(drop))
	for i := range slots {
		if !drop[i] {
			out = append(out, slots[i])
		}
	}
	return out
}

// SlotMember names holder's k-th unit (k ≥ 1): the holder itself for the
// first, holder NUL k for the others. The Lua script names them alike.
func SlotMember(holder string, k int64) string {
	if k == 1 {
		return holder
	}
	return holder + "\x00" + strconv.FormatInt(k, 10)
}

// memberUnit reports whether m is one of holder's units, and which.
func memberUnit(m, holder string) (int64, bool) {
	if m == holder {
		return 1, true
	}
	if len(m) <= len(holder)+1 || m[:len(holder)] != holder || m[len(holder)] != 0 {
		return 0, false
	}
	digits := m[len(holder)+1:]
	k, err := strconv.ParseInt(digits, 10, 64)
	return k, err == nil && k > 1 && strconv.FormatInt(k, 10) == digits // as SlotMember writes it
}

// concurrencyGiveBack frees holder's units, up to cost of them: a refund
// of a holder that holds none (it expired, or was refused and took
// nothing) frees nothing.
func concurrencyGiveBack(s State, p Params, now, cost int64) (State, float64) {
	live := liveSlots(s.Slots, p, &now)
	slots := dropUnits(live, p.Holder, cost, -1)
	return State{Exists: len(slots) > 0, Slots: slots}, float64(len(live) - len(slots))
}

// concurrencyRefund undoes a Take at taken: the holder's units taken then.
func concurrencyRefund(s State, p Params, taken, cost int64) State {
	slots := dropUnits(s.Slots, p.Holder, cost, taken)
	return State{Exists: len(slots) > 0, Slots: slots}
}

// MaxConcurrencyLimit caps a concurrency limit, and MaxHolderLen the bytes
// of a holder's name (longer request ids are hashed to fit: pkg/limiter):
// a key holds a member per unit, up to 2 × Limit of them.
const (
	MaxConcurrencyLimit = 10_000
	MaxHolderLen        = 64
)

func validateConcurrency(p Params) error {
	switch {
	case p.Limit > MaxConcurrencyLimit:
		return fmt.Errorf("concurrency keeps an entry per unit held, so requests_per_unit (its limit) may be at most %d (got %d)", MaxConcurrencyLimit, p.Limit)
	case p.Holder == "":
		return errors.New("concurrency needs a holder: the request's own id, which its refund names")
	case len(p.Holder) > MaxHolderLen:
		return fmt.Errorf("holder of %d bytes: want at most %d", len(p.Holder), MaxHolderLen)
	case strings.IndexByte(p.Holder, 0) >= 0:
		return errors.New("holder contains NUL, which names a holder's further units (SlotMember)")
	}
	return nil
}

// concurrencyStateBytes bounds a key's memory: 2 × Limit members, each
// with a name of at most MaxHolderLen bytes and its unit's number.
func concurrencyStateBytes(p Params) int64 {
	return 64 + 2*p.Limit*(int64(unsafe.Sizeof(Slot{}))+MaxHolderLen+8)
}
