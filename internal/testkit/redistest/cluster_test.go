package redistest

import (
	"fmt"
	"testing"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("StartCluster(3) = %d addrs, %d nodes; want 3, 3", len(c.Addrs), len(c.Nodes))
	}
	cc := c.Client(t)

	// Enough keys that every master owns some; check that they do, so the
	// test really crosses nodes.
	prefix := Prefix(t)
	masters := map[string]bool{}
	for i := range 32 {
		key := fmt.Sprintf("%sk%d", prefix, i)
		val := fmt.Sprint(i)
		if err := cc.Set(ctx, key, val, 0).Err(); err != nil {
			t.Fatalf("Set(%q): %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != val {
			t.Fatalf("Get(%q) = %q, %v; want %q", key, got, err, val)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%q): %v", key, err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("keys landed on masters %v; want all 3 of %v", masters, c.Addrs)
	}
}
