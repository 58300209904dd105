package flagenv

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestRedacted: whatever a value holds — a URL with credentials, one that
// does not parse, a list, an address with credentials before an @ — its
// shown form keeps the scheme and what follows the last @, and nothing of
// what comes before.
func TestRedacted(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://app:S3cret@127.0.0.1:6379/2", "redis://xxxxx@127.0.0.1:6379/2"},
		{"rediss://:S3cret@redis.svc:6380", "rediss://xxxxx@redis.svc:6380"},
		{"redis://app:Xq7Vb/S3cret@127.0.0.1:6379", "redis://xxxxx@127.0.0.1:6379"},                     // does not parse
		{"redis://admin:S3cret@redis:%2F%2F127.0.0.1:6379", "redis://xxxxx@redis:%2F%2F127.0.0.1:6379"}, // a URL inside a URL
		{"redis://a:p@ss@host:1", "redis://xxxxx@host:1"},
		{"app:S3cret@127.0.0.1:6379", "xxxxx@127.0.0.1:6379"},
		{"mymaster,redis://u:S3cret@a:1,b:2", "mymaster,redis://xxxxx@a:1,b:2"},
		{"unix://u:S3cret@/run/redis.sock", "unix://xxxxx@/run/redis.sock"},
		{"redis://10.0.0.1:6379?db=1&password=S3cret&username=app", "redis://10.0.0.1:6379?db=1&password=xxxxx&username=app"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Redacted(tt.in); got != tt.want {
			t.Errorf("Redacted(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestParseErrorRedacts: a value that a flag refuses is named in the
// error without the credentials it carries.
func TestParseErrorRedacts(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("store-timeout", 0, "")
	err := Parse(fs, nil, "SLUICE_", func(k string) string { return "redis://app:S3cret@h:1" })
	if err == nil || !strings.Contains(err.Error(), "SLUICE_STORE_TIMEOUT") || strings.Contains(err.Error(), "S3cret") {
		t.Errorf("Parse with a URL for a duration: %v; want an error naming SLUICE_STORE_TIMEOUT without the password", err)
	}
}

// TestParseRedactsArguments: a credential given to a flag that refuses it
// is redacted where the flag package quotes it, in what it prints and in
// the error, and the rest is as the flag package has it.
func TestParseRedactsArguments(t *testing.T) {
	var printed strings.Builder
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&printed)
	fs.Int("cache-size", 0, "")
	err := Parse(fs, []string{"-cache-size", "redis://app:S3cret@h:1"}, "SLUICE_", func(string) string { return "" })
	if err == nil || strings.Contains(err.Error()+printed.String(), "S3cret") {
		t.Errorf("Parse = %v, printing %q; want an error, the password in neither", err, printed.String())
	}
	if !strings.Contains(printed.String(), `invalid value "redis://xxxxx@h:1" for flag -cache-size`) || !strings.Contains(printed.String(), "Usage of t") {
		t.Errorf("printed %q; want the flag package's error, redacted, and the usage", printed.String())
	}
}
