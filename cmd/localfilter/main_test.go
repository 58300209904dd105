package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "l.yaml")
	os.WriteFile(cfg, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644)
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-config", cfg}, nil, "-upstream is required"},
		{[]string{"-upstream", "127.0.0.1:1"}, nil, "-config is required"},
		{[]string{"-config", cfg, "-upstream", "127.0.0.1:1", "-mode", "eventually"}, nil, "-mode"},
		{[]string{"-config", cfg, "-upstream", "127.0.0.1:1", "-local-fraction", "1.5"}, nil, "-local-fraction"},
		{[]string{"-config", cfg}, map[string]string{"SLUICE_UPSTREAM": "127.0.0.1:1", "SLUICE_FLUSH_INTERVAL": "often"}, "SLUICE_FLUSH_INTERVAL"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
}
