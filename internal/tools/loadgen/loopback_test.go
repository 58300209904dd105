package loadgen

import (
	"context"
	"strings"
	"testing"
)

func TestLoopbackAddr(t *testing.T) {
	ctx := context.Background()
	ok := []struct{ in, want string }{
		{"127.0.0.1:8081", "127.0.0.1:8081"},
		{"127.3.4.5:1", "127.3.4.5:1"},
		{"[::1]:8081", "[::1]:8081"},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1:80"},
	}
	for _, tt := range ok {
		got, err := LoopbackAddr(ctx, tt.in, false)
		if err != nil || got != tt.want {
			t.Errorf("LoopbackAddr(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	// localhost must resolve to loopback only; whichever it picks is dialled.
	if got, err := LoopbackAddr(ctx, "localhost:9", false); err != nil || !(strings.HasPrefix(got, "127.") || got == "[::1]:9") {
		t.Errorf("LoopbackAddr(localhost:9) = %q, %v; want a loopback ip:port", got, err)
	}

	refused := []string{
		"10.0.0.1:8081", "192.168.1.1:80", "172.16.0.1:80", "8.8.8.8:53",
		"0.0.0.0:8081", "[::]:8081", "[2001:db8::1]:80",
		":8081",                  // the listen form, not a target
		"127.0.0.1",              // no port
		"dns:///127.0.0.1:80",    // not host:port
		"nonexistent.invalid:80", // does not resolve: refused, never dialled
	}
	for _, in := range refused {
		if got, err := LoopbackAddr(ctx, in, false); err == nil {
			t.Errorf("LoopbackAddr(%q) = %q, nil; want it refused", in, got)
		}
	}

	// -allow-remote passes the address through unresolved (nothing is
	// dialled here).
	if got, err := LoopbackAddr(ctx, "10.0.0.1:8081", true); err != nil || got != "10.0.0.1:8081" {
		t.Errorf("LoopbackAddr(10.0.0.1:8081, allowRemote) = %q, %v; want it unchanged", got, err)
	}
}
