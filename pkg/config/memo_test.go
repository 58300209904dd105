package config

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestLimitMemo(t *testing.T) {
	var derived atomic.Int64
	derive := func(l *Limit) *string {
		derived.Add(1)
		s := l.Path
		return &s
	}
	a, b := &Limit{Path: "a"}, &Limit{Path: "b"}
	cfg1, cfg2 := &Config{}, &Config{}
	var memo LimitMemo[*string]

	first := memo.Get(cfg1, a, derive)
	if memo.Get(cfg1, a, derive) != first || *first != "a" {
		t.Fatal("the same limit of the same snapshot derived twice")
	}
	if *memo.Get(cfg1, b, derive) != "b" || derived.Load() != 2 {
		t.Fatalf("derived %d times for two limits, want 2", derived.Load())
	}
	// A reload: the new snapshot's values are derived afresh, and the old
	// snapshot's are no longer held.
	if memo.Get(cfg2, a, derive) == first || derived.Load() != 3 {
		t.Fatal("a new snapshot reused the old one's value")
	}
	if memo.p.Load().cfg != cfg2 {
		t.Fatal("the memo still holds the old snapshot")
	}
	// No config: nothing kept.
	if memo.Get(nil, a, derive) == memo.Get(nil, a, derive) {
		t.Fatal("values kept without a config")
	}

	// Concurrent readers of one snapshot all see one value per limit.
	var wg sync.WaitGroup
	var memo2 LimitMemo[*string]
	got := make([]*string, 8)
	for i := range got {
		wg.Go(func() { got[i] = memo2.Get(cfg1, a, derive) })
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatal("concurrent readers saw different values for one limit")
		}
	}
}
