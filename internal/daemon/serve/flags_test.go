package serve

import (
	"flag"
	"io"
	"log/slog"
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
		// A client name with no client certificate to check it on.
		{[]string{"-config", "c.yaml", "-grpc-tls-cert", "x", "-grpc-tls-key", "y", "-grpc-tls-client-san", "sidecar-a"}, "-grpc-tls-client-san", 0},
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

// TestReferenceSettingsLogged: Parse keeps the flags the reference's
// variables set and those it ignores, and LogReference logs them once
// without a value; GRPC_CLIENT_TLS_SAN becomes -grpc-tls-client-san, and
// without GRPC_CLIENT_TLS_CACERT Validate refuses it.
func TestReferenceSettingsLogged(t *testing.T) {
	env := map[string]string{"RUNTIME_ROOT": "/data", "PROMETHEUS_ADDR": ":19001", "USE_STATSD": "false",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_SAN": "sidecar-a"}
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, ":1", ":2")
	if err := f.Parse(fs, nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if f.TLS.ClientSAN != "sidecar-a" {
		t.Errorf("-grpc-tls-client-san %q from GRPC_CLIENT_TLS_SAN; want sidecar-a", f.TLS.ClientSAN)
	}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "GRPC_CLIENT_TLS_SAN") {
		t.Errorf("Validate() = %v; want GRPC_CLIENT_TLS_SAN without a client CA refused", err)
	}
	var buf strings.Builder
	f.LogReference(slog.New(slog.NewTextHandler(&buf, nil)))
	logs := buf.String()
	for _, want := range []string{"-config from RUNTIME_ROOT", "variable=PROMETHEUS_ADDR"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	for _, not := range []string{"USE_STATSD", ":19001"} {
		if strings.Contains(logs, not) {
			t.Errorf("the log holds %q:\n%s", not, logs)
		}
	}
}
