package redistest

import (
	"strings"
	"testing"
)

func TestPrefix(t *testing.T) {
	for _, name := range []string{
		"plain",
		"with space{tag}:colon/slash",
		strings.Repeat("long", 40),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := Prefix(t), Prefix(t)
			if a == b {
				t.Fatalf("Prefix twice = %q, %q; want distinct", a, b)
			}
			if !strings.HasPrefix(a, "TestPrefix_") {
				t.Errorf("Prefix = %q; want it to start with the sanitized test name", a)
			}
			body := strings.TrimSuffix(a, ":")
			if strings.ContainsAny(body, "{}: /") {
				t.Errorf("Prefix = %q; want no hash-tag braces, separators or spaces before the final ':'", a)
			}
			if len(a) > maxPrefixName+10 {
				t.Errorf("len(Prefix) = %d; want at most %d", len(a), maxPrefixName+10)
			}
		})
	}
}
