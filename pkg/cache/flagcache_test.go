package cache

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestNewRejectsNonPositiveSize(t *testing.T) {
	for _, size := range []int{0, -1, maxShards * (math.MaxInt32 - 1)} {
		if c, err := New(size); err == nil {
			t.Errorf("New(%d) = %v, nil; want an error", size, c)
		}
	}
}

func TestUntil(t *testing.T) {
	t0 := time.Now()
	sec := time.Second
	type add struct {
		key   string
		until time.Duration // from t0
	}
	tests := []struct {
		name    string
		adds    []add
		remove  string
		query   string        // the key asked for; "k" if empty
		at      time.Duration // from t0
		want    bool
		wantAt  time.Duration // deadline reported, from t0
		wantLen int           // after the Until
	}{
		{name: "absent", at: 0, want: false},
		{name: "before deadline", adds: []add{{"k", sec}}, at: sec - 1, want: true, wantAt: sec, wantLen: 1},
		{name: "at deadline expires and is removed", adds: []add{{"k", sec}}, at: sec, wantLen: 0},
		{name: "after deadline", adds: []add{{"k", sec}}, at: 2 * sec, wantLen: 0},
		{name: "other key", adds: []add{{"k", sec}}, query: "j", at: 0, wantLen: 1},
		{name: "newest answer wins when later", adds: []add{{"k", sec}, {"k", 3 * sec}}, at: 2 * sec, want: true, wantAt: 3 * sec, wantLen: 1},
		{name: "newest answer wins when earlier", adds: []add{{"k", 3 * sec}, {"k", sec}}, at: 2 * sec, wantLen: 0},
		{name: "past deadline clears the flag", adds: []add{{"k", 3 * sec}, {"k", -sec}}, at: 0, wantLen: 0},
		{name: "removed", adds: []add{{"k", sec}}, remove: "k", at: 0, wantLen: 0},
		{name: "remove absent", adds: []add{{"k", sec}}, remove: "j", at: 0, want: true, wantAt: sec, wantLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(8)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.adds {
				c.Add(a.key, t0.Add(a.until))
			}
			if tt.remove != "" {
				c.Remove(tt.remove)
			}
			key := tt.query
			if key == "" {
				key = "k"
			}
			until, ok := c.Until(key, t0.Add(tt.at))
			if ok != tt.want || (ok && !until.Equal(t0.Add(tt.wantAt))) {
				t.Errorf("Until(%q, t0+%v) = t0+%v, %v; want t0+%v, %v",
					key, tt.at, until.Sub(t0), ok, tt.wantAt, tt.want)
			}
			if got := c.Len(); got != tt.wantLen {
				t.Errorf("Len() = %d; want %d", got, tt.wantLen)
			}
		})
	}
}

// An entry never extends itself: repeated hits do not move its deadline.
func TestHitsDoNotExtend(t *testing.T) {
	c, _ := New(4)
	t0 := time.Now()
	c.Add("k", t0.Add(time.Second))
	for i := range 10 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if until, ok := c.Until("k", now); !ok || !until.Equal(t0.Add(time.Second)) {
			t.Fatalf("Until(k, t0+%v) = %v, %v; want t0+1s, true", now.Sub(t0), until.Sub(t0), ok)
		}
	}
	if _, ok := c.Until("k", t0.Add(time.Second)); ok {
		t.Errorf("Until(k, t0+1s) = true after hits; want false")
	}
}

func TestBounded(t *testing.T) {
	for _, size := range []int{1, 2, 3, 15, 16, 17, 100, 1000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c, err := New(size)
			if err != nil {
				t.Fatal(err)
			}
			future := time.Now().Add(time.Hour)
			for i := range 20 * size {
				c.Add("key-"+strconv.Itoa(i), future)
				if got := c.Len(); got > size {
					t.Fatalf("after %d adds Len() = %d; want <= %d", i+1, got, size)
				}
			}
			// 20×size keys fill every shard; the capacities sum to size.
			if got := c.Len(); got != size {
				t.Errorf("Len() = %d; want %d", got, size)
			}
		})
	}
}

// keysInOneShard returns n distinct keys that c maps to the same shard.
func keysInOneShard(c *OverLimit, n int) []string {
	first := c.shard("k0")
	keys := []string{"k0"}
	for i := 1; len(keys) < n; i++ {
		k := "k" + strconv.Itoa(i)
		if c.shard(k) == first {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestLeastRecentlyUsedIsEvicted(t *testing.T) {
	c, _ := New(2 * maxShards) // two keys per shard
	k := keysInOneShard(c, 3)
	t0 := time.Now()
	c.Add(k[0], t0.Add(time.Hour))
	c.Add(k[1], t0.Add(time.Hour))
	if _, ok := c.Until(k[0], t0); !ok { // k[0] now most recently used
		t.Fatalf("Until(%s) = false; want true", k[0])
	}
	c.Add(k[2], t0.Add(time.Hour)) // evicts k[1]
	for key, want := range map[string]bool{k[0]: true, k[1]: false, k[2]: true} {
		if _, ok := c.Until(key, t0); ok != want {
			t.Errorf("Until(%s) = %v; want %v", key, ok, want)
		}
	}
}

func TestUntilDoesNotAllocate(t *testing.T) {
	c, _ := New(64)
	t0 := time.Now()
	c.Add("hit", t0.Add(time.Hour))
	for _, key := range []string{"hit", "miss"} {
		if n := testing.AllocsPerRun(100, func() { c.Until(key, t0) }); n != 0 {
			t.Errorf("Until(%q) allocates %v times; want 0", key, n)
		}
	}
}

// Run under -race: concurrent writers and readers on shared keys.
func TestConcurrentUse(t *testing.T) {
	c, _ := New(64)
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprintf("k%d", (g*7+i)%100)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				switch i % 4 {
				case 0:
					c.Add(key, now.Add(10*time.Millisecond))
				case 1:
					c.Remove(key)
				default:
					if until, ok := c.Until(key, now); ok && !now.Before(until) {
						t.Errorf("Until(%s, t0+%v) = t0+%v, true; deadline passed", key, now.Sub(t0), until.Sub(t0))
					}
				}
			}
		})
	}
	wg.Wait()
	if got := c.Len(); got > 64 {
		t.Errorf("Len() = %d; want <= 64", got)
	}
}

func TestShardPadding(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size%128 != 0 {
		t.Errorf("sizeof(shard) = %d; want a multiple of 128 (update the padding)", size)
	}
}

func TestPurge(t *testing.T) {
	c, err := New(100)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		c.Add(k, now.Add(time.Hour))
	}
	c.Purge()
	if _, ok := c.Until("a", now); ok || c.Len() != 0 {
		t.Errorf("after Purge: Until(a) = %v, Len() = %d; want no flags", ok, c.Len())
	}
	c.Add("a", now.Add(time.Hour))
	if _, ok := c.Until("a", now); !ok {
		t.Error("a flag added after Purge is lost")
	}
}
