package limiter

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/topkeys"
)

// TestShownInvisible: a value is shown as it was sent, with every
// character that would not be seen as itself (a format character, a line
// or paragraph separator, a space other than a single inner ASCII space,
// private use, unassigned, an invisible filler or variation selector)
// escaped visibly, and backslashes doubled so that an escape cannot be
// sent as text. The finding: U+202E, U+200B and U+2028 passed as
// printable, so admin\u202Etxt.exe showed as adminexe.txt and acme\u200B as
// acme.
func TestShownInvisible(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"admin\u202etxt.exe", `admin\u202etxt.exe`}, // right-to-left override
		{"acme\u200b", `acme\u200b`},                 // zero width space
		{"a\u2028b", `a\u2028b`},                     // line separator
		{"a\u2029b", `a\u2029b`},                     // paragraph separator
		{"\u200c\u200d\u200e\u200f", `\u200c\u200d\u200e\u200f`},
		{"\u202a\u202b\u202c\u202d", `\u202a\u202b\u202c\u202d`},
		{"\u2066x\u2067y\u2068z\u2069", `\u2066x\u2067y\u2068z\u2069`}, // isolates
		{"\ufeffacme", `\ufeffacme`},                                   // byte order mark
		{"\u061cx", `\u061cx`},                                         // Arabic letter mark
		{"\u2060\u2061\u2064", `\u2060\u2061\u2064`},
		{"soft\u00adhyphen", `soft\u00adhyphen`},
		{"acme\u00a0", `acme\u00a0`},           // no-break space
		{"a\u2003b\u3000c", `a\u2003b\u3000c`}, // em space, ideographic space
		{"\u3164", `\u3164`},                   // Hangul filler: a letter that draws nothing
		{"\u115f\u1160\uffa0", `\u115f\u1160\uffa0`},
		{"\u2800", `\u2800`},                             // braille blank
		{"\u034f", `\u034f`},                             // combining grapheme joiner
		{"e\ufe0f", `e\ufe0f`},                           // variation selector
		{"\U000e0041\U000e007f", `\U000e0041\U000e007f`}, // tag characters
		{"\ue000", `\ue000`},                             // private use
		{"\U0010fffd", `\U0010fffd`},                     // private use, plane 16
		{"\u0378", `\u0378`},                             // unassigned
		{"acme ", `acme\u0020`},                          // a space that would not be seen
		{" acme", `\u0020acme`},
		{"a  b", `a \u0020b`},
		{`a\b`, `a\\b`},               // a backslash, doubled
		{`acme\u200b`, `acme\\u200b`}, // an escape sent as text is not the character
		{"10.0.0.1", "10.0.0.1"},      // as sent
		{"tenant-é", "tenant-é"},
		{"日本語 テナント", "日本語 テナント"},
		{"emoji 😀", "emoji 😀"},
		{"", ""},
	} {
		t.Run(tt.want, func(t *testing.T) {
			if got := shown(tt.in); got != tt.want {
				t.Errorf("shown(%+q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestShownDigestForgery: a value that reads as a digest is itself shown by
// digest, so no client can send the form another client's long value is
// shown in.
func TestShownDigestForgery(t *testing.T) {
	long := strings.Repeat("victim", 30)
	forged := shown(long)
	if got := shown(forged); got == forged {
		t.Errorf("shown(%q) = %q: a client can send the digest another value is shown as", forged, got)
	}
}

// TestShownVisibleAndDistinct: on random values built from the characters
// that are hard to see, every shown form holds only characters seen as
// themselves (judged here independently of shown's rule), is at most
// MaxShownBytes, and distinct values are shown distinctly.
func TestShownVisibleAndDistinct(t *testing.T) {
	alphabet := []rune{'a', 'b', ' ', '\\', 'u', '2', '0', 'e', ';', '=', 'é', '\u00a0', '\u00ad', '\u034f', '\u061c', '\u115f',
		'\u200b', '\u200d', '\u200e', '\u2028', '\u2029', '\u202e', '\u2066', '\u2069', '\u2800', '\u3164', '\ufe0f', '\ufeff',
		'\ue000', '\u0378', '\U000e0041', '\U0010fffd', '😀', '\x00', '\n', '\x7f', '\u0085'}
	rng := rand.New(rand.NewPCG(10, 21))
	seen := map[string]string{}
	for range 50_000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		v := b.String()
		got := shown(v)
		if prev, ok := seen[got]; ok && prev != v {
			t.Fatalf("shown(%+q) = shown(%+q) = %q", v, prev, got)
		}
		seen[got] = v
		if len(got) > MaxShownBytes {
			t.Fatalf("shown(%+q) is %d bytes; want at most %d", v, len(got), MaxShownBytes)
		}
		for i, r := range got {
			if !seenAsItself(r) || r == ' ' && (i == 0 || i == len(got)-1 || got[i-1] == ' ') {
				t.Fatalf("shown(%+q) = %+q holds %U, which is not seen as itself", v, got, r)
			}
		}
	}
}

// seenAsItself is an independent judge of a character a reader sees as
// itself: a letter, mark, number, punctuation or symbol that neither is a
// format character nor is ignored when drawn, or ASCII's space.
func seenAsItself(r rune) bool {
	return r == ' ' || r != utf8.RuneError && unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S) &&
		!unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) && r != '\u2800'
}

// TestRefusedShownVisibly: through the service, a refused value holding
// invisible characters is counted in the top keys under its visible form.
func TestRefusedShownVisibly(t *testing.T) {
	top := topkeys.New(topkeys.Options{})
	s := newService(t, `domain: edge
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 1}
`, Options{TopKeys: top})
	for _, v := range []string{"admin\u202etxt.exe", "acme\u200b", "a\u2028b"} {
		for range 2 {
			if _, err := s.Decide(context.Background(), one("edge", "user", v), DecideOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]bool{}
	for _, l := range top.Top(10) {
		for _, k := range l.Keys {
			got[k.Key] = true
		}
	}
	for _, want := range []string{`user=admin\u202etxt.exe`, `user=acme\u200b`, `user=a\u2028b`} {
		if !got[want] {
			t.Errorf("top keys %v lack %s", got, want)
		}
	}
}
