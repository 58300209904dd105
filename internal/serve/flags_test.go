package serve

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	tests := []struct {
		args      []string
		wantErr   string // "" for none
		wantCache int    // ServiceCacheSize
	}{
		{[]string{"-config", "c.yaml"}, "", 100_000},
		{[]string{"-config", "c.yaml", "-cache-size", "0"}, "", -1}, // the flag's 0 turns the cache off
		{[]string{"-config", "c.yaml", "-cache-size", "7"}, "", 7},
		{nil, "-config is required", 0},
		{[]string{"-config", "c.yaml", "-cache-size", "-1"}, "-cache-size", 0},
		{[]string{"-config", "c.yaml", "-shutdown-grace", "-1s"}, "-shutdown-grace", 0},
		{[]string{"-config", "c.yaml", "-log-format", "xml"}, "-log-format", 0},
		{[]string{"-config", "c.yaml", "-log-level", "loud"}, "-log-level", 0},
		{[]string{"-config", "c.yaml", "-grpc-tls-cert", "x"}, "go together", 0},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var f Flags
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.Register(fs, ":1", ":2")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := f.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := f.ServiceCacheSize(); got != tt.wantCache {
					t.Errorf("ServiceCacheSize() = %d, want %d", got, tt.wantCache)
				}
				if f.GRPCAddr != ":1" || f.HTTPAddr != ":2" {
					t.Errorf("listen addresses %q %q, want the daemon's defaults", f.GRPCAddr, f.HTTPAddr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}
