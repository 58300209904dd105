package global

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestRecordAcrossVersions: a rolling upgrade runs old and new servers on
// one Redis. A fixed window stored by a server that kept no previous
// window's count ("t a") is read by this one as having a full previous
// window, so a late record charges all of its hits now, as the old
// servers did; and the state this one stores ("t a b") starts with the
// fields the old ones read.
func TestRecordAcrossVersions(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	ctx := context.Background()
	key := Key(redistest.Prefix(t), "fixed")
	p := algorithm.Params{Kind: algorithm.FixedWindow, Limit: 10, Window: sec}
	w0 := int64(1_780_000_000) * sec
	// An old server stored 3 in the current window, and nothing of the one before.
	if err := client.Set(ctx, key, fmt.Sprintf("%d 3", w0+sec), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got := make([]Result, 1)
	late := Item{Key: key, Params: p, Cost: 4, Mode: algorithm.Force, Age: 20_000}
	start := time.Now()
	if err := rs.DecideAt(ctx, []Item{late}, got, w0+sec+5_000); err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != 3 {
		t.Errorf("a late record on an old state: %d left; want 3 (all 4 charged now, as before)", got[0].Remaining)
	}
	v, err := client.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var tt, a, b float64
	if n, err := fmt.Sscanf(v, "%g %g %g", &tt, &a, &b); n != 3 || err != nil || int64(tt) != w0+sec || a != 7 {
		t.Errorf("stored %q; want the window, its count 7 and the previous window's, in that order", v)
	}
	ttl, err := client.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Less what has passed since the script set it (PTTL counts whole ms):
	// on a loaded machine the calls took more than 50 ms.
	took := time.Since(start).Milliseconds() + 1
	if want := (2*sec - 5_000) / 1000; ttl.Milliseconds() < want-took || ttl.Milliseconds() > want {
		t.Errorf("PTTL %v %d ms later; want about %d ms: the window's end and one more (algorithm.Keep)", ttl, took, want)
	}
}
