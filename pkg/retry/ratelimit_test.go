package retry

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRateLimitReset(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name   string
		lines  []string // RateLimit field lines
		want   time.Duration
		wantOK bool
	}{
		{"sluice's own form", []string{`"per-client";r=0;t=45`}, 45 * s, true},
		{"token name", []string{`default;r=0;t=5`}, 5 * s, true},
		{"spaces after semicolons", []string{`"a"; r=0; t=5`}, 5 * s, true},
		{"t=0 means now", []string{`"a";r=0;t=0`}, 0, true},
		{"longest exhausted policy wins", []string{`"a";r=0;t=3, "b";r=0;t=7, "c";r=0;t=2`}, 7 * s, true},
		{"policies with quota left are not waited for", []string{`"daily";r=500;t=80000, "burst";r=0;t=4`}, 4 * s, true},
		{"across field lines", []string{`"a";r=0;t=3`, `"b";r=0;t=9`}, 9 * s, true},
		{"a later parameter wins", []string{`"a";r=0;t=5;t=2`}, 2 * s, true},
		{"other parameters and types", []string{`"a";pk=:cHsdsRa894==:;x=?1;y=1.5;z=tok/en;r=0;t=6;d=@1700000000`}, 6 * s, true},
		{"other list members of any type", []string{`1, 2.5, ?0, :AQ==:, "a";r=0;t=8`}, 8 * s, true},
		{"huge t saturates", []string{`"a";r=0;t=999999999999999`}, math.MaxInt64, true},

		{"absent", nil, 0, false},
		{"empty", []string{""}, 0, false},
		{"quota left", []string{`"a";r=1;t=3`}, 0, false},
		{"no t", []string{`"a";r=0`}, 0, false},
		{"no r", []string{`"a";t=5`}, 0, false},
		{"negative t", []string{`"a";r=0;t=-1`}, 0, false},
		{"decimal t", []string{`"a";r=0;t=1.5`}, 0, false},
		{"boolean t", []string{`"a";r=0;t`}, 0, false},
		{"string r", []string{`"a";r="0";t=5`}, 0, false},
		{"16-digit integer is malformed", []string{`"a";r=0;t=1234567890123456`}, 0, false},
		{"a malformed member voids the field", []string{`"a";r=0;t=5, garbage(`}, 0, false},
		{"a malformed line voids the field", []string{`"a";r=0;t=5`, `"b`}, 0, false},
		{"trailing comma", []string{`"a";r=0;t=5,`}, 0, false},
		{"space before a semicolon", []string{`"a" ;r=0;t=5`}, 0, false},
		{"upper-case key", []string{`"a";R=0;T=5`}, 0, false},
		{"inner lists are not the draft's syntax", []string{`("a" "b");r=0;t=5`}, 0, false},
		{"draft-07 dictionary form", []string{`limit=10, remaining=0, reset=5`}, 0, false},
		{"unterminated byte sequence", []string{`"a";r=0;t=5;pk=:abc`}, 0, false},
		{"bad string escape", []string{`"a\n";r=0;t=5`}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.lines {
				h.Add("RateLimit", v)
			}
			if got, ok := rateLimitReset(h); got != tt.want || ok != tt.wantOK {
				t.Errorf("rateLimitReset(%q) = %v, %v; want %v, %v", tt.lines, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzRateLimitReset(f *testing.F) {
	for _, s := range []string{`"a";r=0;t=5`, `a;r=0;t=3, "b";r=1;t=9`, `"x";pk=:AQ==:;r=0;t=1`, `1.5, ?1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if d, ok := rateLimitReset(http.Header{"Ratelimit": {v}}); d < 0 || (!ok && d != 0) {
			t.Errorf("rateLimitReset(%q) = %v, %v; want a non-negative wait, 0 when not ok", v, d, ok)
		}
	})
}
