package flagenv

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	env := map[string]string{"SLUICE_GRPC_ADDR": ":1", "SLUICE_CACHE_SIZE": "7", "SLUICE_LOG_LEVEL": "debug"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	addr := fs.String("grpc-addr", ":8081", "")
	size := fs.Int("cache-size", 5, "")
	level := fs.String("log-level", "info", "")
	other := fs.String("other", "default", "")
	if err := Parse(fs, []string{"-log-level", "warn"}, "SLUICE_", func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *addr != ":1" || *size != 7 || *level != "warn" || *other != "default" {
		t.Errorf("got %q %d %q %q; want env for unset flags, the command line over env, defaults otherwise", *addr, *size, *level, *other)
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("cache-size", 5, "")
	err := Parse(fs, nil, "SLUICE_", func(string) string { return "lots" })
	if err == nil || !strings.Contains(err.Error(), "SLUICE_CACHE_SIZE") {
		t.Errorf("bad env value: %v; want an error naming SLUICE_CACHE_SIZE", err)
	}
}
