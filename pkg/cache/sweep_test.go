package cache

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestSweep(t *testing.T) {
	t0 := time.Now()
	sec := time.Second
	type add struct {
		key   string
		until time.Duration // from t0
	}
	tests := []struct {
		name string
		adds []add
		at   time.Duration // Sweep's now, from t0
		want int           // dropped
		kept []string
	}{
		{name: "empty", at: sec},
		{name: "before deadline", adds: []add{{"k", sec}}, at: sec - 1, kept: []string{"k"}},
		{name: "at deadline", adds: []add{{"k", sec}}, at: sec, want: 1},
		{name: "after deadline", adds: []add{{"k", sec}}, at: 2 * sec, want: 1},
		{name: "past deadline added", adds: []add{{"k", -sec}}, at: 0, want: 1},
		{
			name: "some of many",
			adds: []add{{"a", sec}, {"b", 3 * sec}, {"c", 2 * sec}, {"d", 4 * sec}},
			at:   2 * sec, want: 2, kept: []string{"b", "d"},
		},
		{
			name: "newest answer counts",
			adds: []add{{"a", 3 * sec}, {"a", sec}, {"b", sec}, {"b", 3 * sec}},
			at:   2 * sec, want: 1, kept: []string{"b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(64)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.adds {
				c.Add(a.key, t0.Add(a.until))
			}
			if got := c.Sweep(t0.Add(tt.at)); got != tt.want {
				t.Errorf("Sweep(t0+%v) = %d; want %d", tt.at, got, tt.want)
			}
			if got := c.Len(); got != len(tt.kept) {
				t.Errorf("Len() = %d after Sweep; want %d", got, len(tt.kept))
			}
			for _, k := range tt.kept {
				// Until at t0 sees the flag if Sweep kept it.
				if _, ok := c.Until(k, t0); !ok {
					t.Errorf("Until(%s) = false after Sweep; want the flag kept", k)
				}
			}
		})
	}
}

// The LRU order is not the deadlines' order: a long flag at the oldest end
// must not hide the expired ones behind it, however many there are.
func TestSweepWalksPastKeptFlags(t *testing.T) {
	const perShard = 5 * sweepChunk
	c, err := New(maxShards * perShard)
	if err != nil {
		t.Fatal(err)
	}
	keys := keysInOneShard(c, perShard)
	t0 := time.Now()
	for i, k := range keys {
		until := t0.Add(time.Second)
		if i%50 == 0 {
			until = t0.Add(time.Hour) // the oldest among them
		}
		c.Add(k, until)
	}
	wantKept := (perShard + 49) / 50
	if got := c.Sweep(t0.Add(time.Minute)); got != perShard-wantKept {
		t.Errorf("Sweep(t0+1m) = %d; want %d", got, perShard-wantKept)
	}
	if got := c.Len(); got != wantKept {
		t.Errorf("Len() = %d after Sweep; want %d", got, wantKept)
	}
	checkList(t, c.shard(keys[0]))
}

// checkList checks that s's list and map hold the same flags, in slots
// with no gaps, linked both ways.
func checkList(t *testing.T, s *shard) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slots) != len(s.index)+1 {
		t.Fatalf("%d slots for %d flags; want one more, the sentinel", len(s.slots), len(s.index))
	}
	n := 0
	for i := s.slots[0].next; i != 0; i = s.slots[i].next {
		e := &s.slots[i]
		if s.slots[e.next].prev != i || s.slots[e.prev].next != i {
			t.Fatalf("slot %d (%q) badly linked", i, e.key)
		}
		if j, ok := s.index[e.key]; !ok || j != i {
			t.Fatalf("slot %d (%q) on the list; the map has %d, %v", i, e.key, j, ok)
		}
		if n++; n > len(s.index) {
			break
		}
	}
	if n != len(s.index) {
		t.Errorf("list holds %d flags, map %d", n, len(s.index))
	}
}

// Between two of a sweep's lock holds, callers remove, hit, add and evict
// flags, around and at the slot the sweep resumes from.
func TestSweepResumesAfterChanges(t *testing.T) {
	const perShard = 3 * sweepChunk
	later := 2 * time.Hour // a deadline no sweep here reaches
	tests := []struct {
		name    string
		change  func(c *OverLimit, s *shard, keys []string, t0 time.Time, from int)
		wantLen int // flags added during the sweep, for later than its now
	}{
		{"next removed", func(c *OverLimit, s *shard, _ []string, _ time.Time, from int) {
			c.Remove(s.slots[from].key)
		}, 0},
		{"below next removed", func(c *OverLimit, s *shard, _ []string, _ time.Time, from int) {
			c.Remove(s.slots[1].key)
		}, 0},
		{"next expired on a hit", func(c *OverLimit, s *shard, _ []string, t0 time.Time, from int) {
			c.Until(s.slots[from].key, t0.Add(time.Hour))
		}, 0},
		{"hits and new deadlines", func(c *OverLimit, s *shard, _ []string, t0 time.Time, from int) {
			c.Until(s.slots[from].key, t0)
			c.Add(s.slots[from-1].key, t0.Add(time.Second))
			c.Add(s.slots[1].key, t0.Add(later)) // kept
		}, 1},
		{"new keys evict the oldest", func(c *OverLimit, _ *shard, keys []string, t0 time.Time, _ int) {
			for _, k := range keys[perShard : perShard+sweepChunk+1] {
				c.Add(k, t0.Add(later))
			}
		}, sweepChunk + 1},
		{"purged", func(c *OverLimit, _ *shard, _ []string, _ time.Time, _ int) {
			c.Purge()
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(maxShards * perShard)
			if err != nil {
				t.Fatal(err)
			}
			keys := keysInOneShard(c, 2*perShard)
			s := c.shard(keys[0])
			t0 := time.Now()
			for _, k := range keys[:perShard] {
				c.Add(k, t0.Add(time.Second))
			}
			now := t0.Add(time.Minute)
			s.mu.Lock()
			_, from := s.sweepSome(now, -1)
			s.mu.Unlock()
			if from == 0 {
				t.Fatalf("one lock hold swept a shard of %d flags; want at most %d", perShard, sweepChunk)
			}
			tt.change(c, s, keys, t0, from)
			for from != 0 {
				s.mu.Lock()
				_, from = s.sweepSome(now, from)
				s.mu.Unlock()
			}
			checkList(t, s)
			if n := c.Len(); n != tt.wantLen {
				t.Errorf("Len() = %d after the sweep; want %d (every flag until t0+1s gone at t0+1m)", n, tt.wantLen)
			}
		})
	}
}

func TestSweepDoesNotAllocate(t *testing.T) {
	c, _ := New(1000)
	t0 := time.Now()
	for i := range 1000 {
		c.Add("k"+strconv.Itoa(i), t0.Add(time.Hour))
	}
	if n := testing.AllocsPerRun(10, func() { c.Sweep(t0) }); n != 0 {
		t.Errorf("Sweep keeping every flag allocates %v times; want 0", n)
	}
}

// Run under -race: sweeps while callers add, read and remove flags. A flag
// whose deadline has not passed survives every sweep.
func TestSweepConcurrentUse(t *testing.T) {
	c, _ := New(4096)
	t0 := time.Now()
	for i := range 100 {
		c.Add("long-"+strconv.Itoa(i), t0.Add(time.Hour))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				key := "k" + strconv.Itoa((g*7+i)%500)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				switch i % 3 {
				case 0:
					c.Add(key, now.Add(5*time.Millisecond))
				case 1:
					c.Until(key, now)
				default:
					c.Remove(key)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			c.Sweep(t0.Add(time.Duration(10*i) * time.Millisecond))
		}
	})
	wg.Wait()
	for i := range 100 {
		if _, ok := c.Until("long-"+strconv.Itoa(i), t0.Add(time.Minute)); !ok {
			t.Errorf("long-%d: flag until t0+1h lost to a sweep", i)
		}
	}
	for i := range c.shards {
		checkList(t, &c.shards[i])
	}
}
