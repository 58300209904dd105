package limiter

import "testing"

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
