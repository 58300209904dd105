package algorithm

// Item is one limit of a request, on the key that holds its state.
//
// A plain value: copy it freely; concurrent reads are safe.
type Item struct {
	Key    string
	Params Params
	Cost   int64
	Mode   Mode
	// Age, for a Force item, is how long before now its hits were
	// admitted, in µs: they are placed in the window that held them
	// (Record).
	Age int64
	// Shadow items are decided and reported but never veto the request.
	Shadow bool
}

// maxStackItems is how many items DecideAll handles without allocating.
const maxStackItems = 8

// DecideAll decides every item of one request at the same instant, all or
// nothing: if any non-shadow Take item is denied, no item consumes
// anything (a request rejected by one limit costs nothing from its others)
// and the admitted items report what they have left without it. A
// GiveBack item (a refund) is never refused and applies even then: it
// settles a charge made earlier, which the refusal of a new one does not
// undo; it then applies to its key's state as the request found it.
//
// states[i] is the stored state of items[i].Key on entry and the state to
// store on return (unchanged from entry when the request is vetoed, but
// for its refunds). An item whose key appeared earlier in the request sees
// the earlier item's effect; only the last item of a key holds the state
// to store. results must be as long as items. DecideAll reports whether
// the states changed, i.e. whether the request was admitted or carried a
// refund.
func DecideAll(items []Item, states []State, now int64, results []Result) bool {
	var stack [maxStackItems]State
	orig := stack[:0]
	if len(items) > maxStackItems {
		orig = make([]State, 0, len(items))
	}
	orig = append(orig, states[:len(items)]...)
	vetoed, refunds := false, false
	for i := range items {
		s := states[i]
		if j := earlier(items, i); j >= 0 {
			s = states[j]
		}
		if items[i].Mode == Force {
			states[i], results[i] = Record(s, items[i].Params, now, items[i].Age, items[i].Cost)
		} else {
			states[i], results[i] = Decide(s, items[i].Params, now, items[i].Cost, items[i].Mode)
		}
		if !results[i].Allowed && !items[i].Shadow && items[i].Mode == Take {
			vetoed = true
		}
		refunds = refunds || items[i].Mode == GiveBack
	}
	if !vetoed {
		return true
	}
	for i := range items {
		s := orig[i]
		if j := earlier(items, i); j >= 0 {
			s = states[j] // the key's refunds so far
		}
		if items[i].Mode == GiveBack {
			states[i], results[i] = Decide(s, items[i].Params, now, items[i].Cost, GiveBack)
			continue
		}
		if results[i].Allowed {
			_, results[i] = Decide(s, items[i].Params, now, 0, Take)
		}
		states[i] = s
	}
	return refunds
}

// earlier returns the index of the last item before i on the same key, or -1.
func earlier(items []Item, i int) int {
	for j := i - 1; j >= 0; j-- {
		if items[j].Key == items[i].Key {
			return j
		}
	}
	return -1
}

// LastOfKey reports whether items[i] is the last item of its key, the one
// whose state DecideAll leaves to be stored.
func LastOfKey(items []Item, i int) bool {
	for j := i + 1; j < len(items); j++ {
		if items[j].Key == items[i].Key {
			return false
		}
	}
	return true
}
