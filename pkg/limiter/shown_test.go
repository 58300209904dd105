package limiter

import (
	"strings"
	"testing"
)

// TestShown: values shown to operators as sent only when short and
// printable; bytes that are not UTF-8, control characters, separators and
// long values by digest, bounded whatever was sent.
func TestShown(t *testing.T) {
	for _, v := range []string{"\xff\xfe", "a\nb", "a;b", "a=b", "\x7f", strings.Repeat("x", 1<<20)} {
		if got := shown(v); !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+16 {
			t.Errorf("shown(%.20q) = %q; want a digest", v, got)
		}
	}
	for _, v := range []string{"10.0.0.1", "tenant-é", ""} {
		if got := shown(v); got != v {
			t.Errorf("shown(%q) = %q; want it as sent", v, got)
		}
	}
}
