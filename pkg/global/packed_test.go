package global

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/algorithm"
)

// TestStateFormats: a server told -redis-state-format packed stores a
// state as a version byte and a double a field; one left on text reads it
// and stores it as text again, and the packed one reads that back: the
// same count goes on across the switch, both ways. A refund rewrites a
// state in the format it found it in, whichever server sends it.
func TestStateFormats(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	text := newRedisStore(t, RedisOptions{Client: client, InjectTime: true})
	packed := newRedisStore(t, RedisOptions{Client: client, InjectTime: true, PackedState: true})
	now := int64(1_780_000_000)*sec + 1234
	fields := map[algorithm.Kind]int{algorithm.TokenBucket: 2, algorithm.GCRA: 1, algorithm.SlidingWindow: 3, algorithm.FixedWindow: 3}
	for kind, n := range fields {
		t.Run(kind.String(), func(t *testing.T) {
			key := Key(redistest.Prefix(t), "k")
			p := algorithm.Params{Kind: kind, Limit: 10, Window: 60 * sec, Burst: 10}
			stored := func() string {
				v, err := client.Get(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			for i, rs := range []*Redis{packed, text, packed} {
				got := make([]Result, 1)
				now += sec / 10
				if err := rs.DecideAt(ctx, []Item{{Key: key, Params: p, Cost: 1}}, got, now); err != nil {
					t.Fatal(err)
				}
				if want := int64(10 - 1 - i); got[0].Remaining != want {
					t.Errorf("take %d: %d remaining; want %d", i+1, got[0].Remaining, want)
				}
				v := stored()
				if rs == packed && (len(v) != 1+8*n || v[0] != 1) {
					t.Errorf("take %d, packed: stored %q; want a version byte 1 and %d doubles", i+1, v, n)
				}
				if rs == text && (len(strings.Fields(v)) != n || v[0] == 1) {
					t.Errorf("take %d, text: stored %q; want %d numbers", i+1, v, n)
				}
			}
			// A take the packed server made, given back by the text one:
			// still packed.
			items := []Item{{Key: key, Params: p, Cost: 1}}
			got := make([]Result, 1)
			now += sec / 10
			taken, err := packed.decideGroup(ctx, items, got, now, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if err := text.refundGroup(ctx, items, got, taken, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if v := stored(); len(v) != 1+8*n || v[0] != 1 {
				t.Errorf("refunded by a text server: stored %q; want it packed, as it was", v)
			}
			check := make([]Result, 1)
			if err := text.DecideAt(ctx, []Item{{Key: key, Params: p}}, check, now); err != nil {
				t.Fatal(err)
			}
			if check[0].Remaining != 7 {
				t.Errorf("after the refund: %d remaining; want 7", check[0].Remaining)
			}
		})
	}
}

// TestHostileStates: a state that is not what a server wrote (a packed
// one of the wrong length, a megabyte, bytes that are neither format)
// fails its own request alone, which the caller's failure mode answers;
// the request after it, on another key, is decided. A packed state of
// non-finite numbers decides as a full bucket would.
func TestHostileStates(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	rs := newRedisStore(t, RedisOptions{Client: client, InjectTime: true, PackedState: true})
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 60 * sec, Burst: 10}
	doubles := func(xs ...float64) string {
		b := []byte{1}
		for _, x := range xs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return string(b)
	}
	now := int64(1_780_000_000) * sec
	for _, tt := range []struct {
		name, v string
		fails   bool
	}{
		{"short", "\x01abc", true},
		{"a megabyte", "\x01" + strings.Repeat("\x00", 1<<20), true},
		{"neither format", "\xff\xfe 1", true},
		{"NaN", doubles(math.NaN(), 1e15), false},
		{"infinite", doubles(math.Inf(1), -1e300), false},
	} {
		key, other := Key(redistest.Prefix(t), tt.name), Key(redistest.Prefix(t), tt.name, "other")
		if err := client.Set(ctx, key, tt.v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		got := make([]Result, 1)
		err := rs.DecideAt(ctx, []Item{{Key: key, Params: p, Cost: 1}}, got, now)
		if tt.fails && err == nil {
			t.Errorf("%s: decided %+v; want the request to fail", tt.name, got[0])
		}
		if !tt.fails && (err != nil || !got[0].Allowed || got[0].Remaining != 9) {
			t.Errorf("%s: %+v, %v; want admitted with 9 left", tt.name, got[0], err)
		}
		if err := rs.DecideAt(ctx, []Item{{Key: other, Params: p, Cost: 1}}, got, now); err != nil || !got[0].Allowed {
			t.Errorf("%s: the next request, on another key: %+v, %v; want admitted", tt.name, got[0], err)
		}
	}
}
