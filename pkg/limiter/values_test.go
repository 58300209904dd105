package limiter

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/testkit/corecfg"
)

const valuesConfig = corecfg.Values

func agent(v string) *testRequest { return edge(desc("user_agent", v)) }

// TestEntryValue: a value is counted as it is when it is UTF-8 of at most
// MaxValueLen bytes; else by a form led by NUL, at most MaxValueLen bytes
// and UTF-8, distinct for distinct values, and its own form.
func TestEntryValue(t *testing.T) {
	long := strings.Repeat("k", MaxValueLen+1)
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.1", "10.0.0.1"},
		{"tenant-é", "tenant-é"},
		{strings.Repeat("k", MaxValueLen), strings.Repeat("k", MaxValueLen)},
		{"curl\xff", "\x00utf8:curl\\xff"},
		{"a\\b\xfe", "\x00utf8:a\\\\b\\xfe"},
		{long, "\x00sha256:"},
		{strings.Repeat("\xff", MaxValueLen/2), "\x00sha256:"}, // its escaped form would not fit
	} {
		got := EntryValue(tt.in)
		if got != tt.want && !(tt.want == "\x00sha256:" && strings.HasPrefix(got, tt.want) && len(got) == len(tt.want)+64) {
			t.Errorf("EntryValue(%.20q) = %.40q; want %.40q", tt.in, got, tt.want)
		}
		if len(got) > MaxValueLen || !utf8.ValidString(got) || EntryValue(got) != got {
			t.Errorf("EntryValue(%.20q) = %.40q: not a bounded UTF-8 form of its own", tt.in, got)
		}
	}
	if EntryValue(long) == EntryValue(long+"x") || EntryValue("a\xff") == EntryValue("a\xfe") {
		t.Error("distinct values share a form")
	}
}

// TestLongValuesAreLimited: a value past MaxValueLen is counted by its
// digest, not refused: padding a header is no way around a limit.
func TestLongValuesAreLimited(t *testing.T) {
	h := start(t, Options{})
	long := strings.Repeat("k", MaxValueLen+1)
	other := strings.Repeat("k", MaxValueLen) + "x"
	for range 3 {
		h.decide(t, edge(desc("remote_address", long)))
	}
	if a := h.decide(t, edge(desc("remote_address", long))); a.Overall != OverLimit {
		t.Errorf("a long value past its limit of 3: %s; want OVER_LIMIT", verdict(a))
	}
	if a := h.decide(t, edge(desc("remote_address", other))); a.Overall != OK {
		t.Errorf("another long value: %s; want its own counter, OK", verdict(a))
	}
}

// TestValuesNotUTF8AreDecided: a value holding bytes that are not UTF-8
// (Envoy forwards header bytes as they arrive) is decided like any other,
// matched on its bytes and counted on them: neither refused nor merged
// with another value.
func TestValuesNotUTF8AreDecided(t *testing.T) {
	h := start(t, Options{Config: configOf(t, valuesConfig)})
	for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		if got := verdict(h.decide(t, agent("curl\xff"))); got != want {
			t.Fatalf("request %d with a 0xFF byte: %s; want %s", i+1, got, want)
		}
	}
	for _, other := range []string{"curl\xfe", "curl", "curl?", `curl\xff`, "\x00utf8:curl"} {
		if got := verdict(h.decide(t, agent(other))); got != "OK:OK" {
			t.Errorf("%q shares the count of \"curl\\xff\": %s", other, got)
		}
	}
	if got := verdict(h.decide(t, agent("sqlmap\xff"))); got != "OVER_LIMIT:OVER_LIMIT" {
		t.Errorf("a scanner with a stray byte: %s; want blocked", got)
	}
}

// TestLongValuesMatchTheirRules: padding a value past MaxValueLen neither
// steps around a rule it matches nor merges it with another long value
// (the finding: a padded scanner fell through to the looser limit).
func TestLongValuesMatchTheirRules(t *testing.T) {
	h := start(t, Options{Config: configOf(t, valuesConfig)})
	pad := strings.Repeat("A", 1100)
	for _, v := range []string{"sqlmap/1.7" + pad, pad + "sqlmap/1.7", pad + "sqlmap/1.7" + pad + pad} {
		if got := verdict(h.decide(t, agent(v))); got != "OVER_LIMIT:OVER_LIMIT" {
			t.Errorf("a scanner padded to %d bytes: %s; want blocked", len(v), got)
		}
	}
	a, b := "a"+pad, "b"+pad
	for i, want := range []string{"OK:OK", "OK:OK", "OVER_LIMIT:OVER_LIMIT"} {
		if got := verdict(h.decide(t, agent(a))); got != want {
			t.Fatalf("long value, request %d: %s; want %s", i+1, got, want)
		}
	}
	if got := verdict(h.decide(t, agent(b))); got != "OK:OK" {
		t.Errorf("another long value shares the count: %s", got)
	}
}
