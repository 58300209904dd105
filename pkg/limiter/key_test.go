package limiter

import (
	"context"
	"testing"
)

func TestKey(t *testing.T) {
	tests := []struct{ a, b []string }{
		{[]string{"ab", "c"}, []string{"a", "bc"}},
		{[]string{"a_b"}, []string{"a", "b"}},
		{[]string{"", "x"}, []string{"x", ""}},
		{[]string{"d", "k", "v"}, []string{"d", "k", "v", ""}},
	}
	for _, tt := range tests {
		if Key("p:", tt.a...) == Key("p:", tt.b...) {
			t.Errorf("Key(%q) == Key(%q); want different", tt.a, tt.b)
		}
	}
	// A value cannot move the hash tag: every key is prefix{32 hex} and
	// its slot is the tag's, whatever braces the values hold.
	k := Key("sluice:", "domain", "key", "{evil}", "}{")
	if len(k) != len("sluice:")+2+tagLen || k[len("sluice:")] != '{' || k[len(k)-1] != '}' {
		t.Errorf("Key = %q; want sluice:{<%d hex>}", k, tagLen)
	}
	huge := string(make([]byte, 1<<20))
	if n := len(Key("sluice:", huge)); n != len("sluice:")+2+tagLen {
		t.Errorf("len(Key(1 MiB value)) = %d; want bounded", n)
	}
	// The key of a limit instance never changes between releases: state in
	// Redis outlives the process.
	if k := Key("sluice:", "edge", "remote_address", "token_bucket", "remote_address", "10.0.0.1"); k != "sluice:{86ca420ea617e15fdc7635ded32e273d}" {
		t.Errorf("Key = %q; want the key earlier releases built", k)
	}
	var buf [64]byte
	var nameBuf [64]byte
	if avg := testing.AllocsPerRun(100, func() { NewKeyName(nameBuf[:]).Add("edge").Add("x").AppendKey(buf[:0], "sluice:") }); avg != 0 {
		t.Errorf("building a key by KeyName allocates %v times; want 0", avg)
	}
}

// keysSeen is a Decider that notes the keys it is asked to decide and
// admits them.
type keysSeen struct{ keys []string }

func (k *keysSeen) Decide(_ context.Context, b *Batch) error {
	for i := range b.Items {
		k.keys = append(k.keys, b.Items[i].Key)
		b.Results[i].Allowed = true
	}
	return nil
}

// TestCounterKey: CounterKey is the key a request carrying the entries is
// decided on, share_threshold's values on one key, a plain wildcard's
// values each on its own.
func TestCounterKey(t *testing.T) {
	current := configOf(t, referenceConfig)
	cfg := current()
	seen := &keysSeen{}
	h := start(t, Options{Config: current, Decider: seen, KeyPrefix: "p:"})
	for _, d := range []descriptor{desc("files", "files/a"), desc("files", "files/b"), desc("pages", "pages/a"), desc("pages", "pages/b")} {
		seen.keys = seen.keys[:0]
		h.decide(t, edge(d))
		l := cfg.Match("edge", d.entries)
		if want := CounterKey("p:", "edge", l, d.entries); len(seen.keys) != 1 || seen.keys[0] != want {
			t.Errorf("%v decided on %v; CounterKey says %s", d.entries, seen.keys, want)
		}
	}
	files := cfg.Match("edge", desc("files", "files/a").entries)
	pages := cfg.Match("edge", desc("pages", "pages/a").entries)
	if CounterKey("", "edge", files, desc("files", "files/a").entries) != CounterKey("", "edge", files, desc("files", "files/b").entries) {
		t.Error("share_threshold's two values on two keys; want one")
	}
	if CounterKey("", "edge", pages, desc("pages", "pages/a").entries) == CounterKey("", "edge", pages, desc("pages", "pages/b").entries) {
		t.Error("a plain wildcard's two values on one key; want two")
	}
}
