package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestDebugTop: a client just refused shows at the top of its limit on
// /debug/top, with its refusals; a long value shows by digest.
func TestDebugTop(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	for range 10 {
		if _, err := s.client.ShouldRateLimit(ctx, request("abuser")); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		s.client.ShouldRateLimit(ctx, request(strings.Repeat("x", 200)))
	}
	code, body := get(t, "http://"+s.httpAddr+"/debug/top")
	if code != 200 {
		t.Fatalf("/debug/top = %d %s", code, body)
	}
	var top struct {
		Limits []struct {
			Limit   string `json:"limit"`
			Refused int64  `json:"refused"`
			Keys    []struct {
				Key   string `json:"key"`
				Count int64  `json:"count"`
			} `json:"keys"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(top.Limits) != 1 || top.Limits[0].Limit != "per-client" || top.Limits[0].Refused != 7+2 {
		t.Fatalf("/debug/top = %s; want per-client with 9 refusals", body)
	}
	keys := top.Limits[0].Keys
	if keys[0].Key != "client=abuser" || keys[0].Count != 7 {
		t.Errorf("the top key: %+v; want client=abuser refused 7 times", keys[0])
	}
	if len(keys) < 2 || !strings.HasPrefix(keys[1].Key, "client=sha256:") {
		t.Errorf("a 200-byte value: %+v; want it by digest", keys)
	}
}
