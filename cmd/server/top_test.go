package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/wire"
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

// TestAdminPageHostile: what a hostile client controls reaches the admin
// page and /debug/top bounded and inert: values that are not UTF-8, are
// markup or are 1 KiB are shown escaped or by digest, 1,000 more distinct
// keys refused leave the page the size it had with 200, and /debug/top's
// n and the page's query take any value.
func TestAdminPageHostile(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	values := []string{"\xff\xfe", "<script>alert(1)</script>", `"><img src=x onerror=alert(1)>`, strings.Repeat("x", 1024), "a\x00b", "é\u202e"}
	refuse := func(v string) {
		for range 4 { // 3 admitted, then refused
			// As Envoy sends them: bytes that are not UTF-8 as they came.
			err := s.conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
				request(v), new(rlsv3.RateLimitResponse), grpc.ForceCodecV2(wire.Codec{}))
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, v := range values {
		refuse(v)
	}
	page := func(from, to int) string {
		for i := from; i < to; i++ {
			refuse(fmt.Sprint("client-", i, "-\xff"))
		}
		time.Sleep(1100 * time.Millisecond) // a sample of the chart: both pages chart the same series
		code, body := get(t, "http://"+s.httpAddr+"/")
		if code != 200 {
			t.Fatalf("/ = %d", code)
		}
		return body
	}
	small, large := page(0, 200), page(200, 1_200)
	if len(large) > len(small)+1<<10 {
		t.Errorf("the page grew from %d to %d bytes with 1,000 more refused keys", len(small), len(large))
	}
	body := large
	for _, bad := range []string{"<script>alert", "<img", "\xff", "\x00", "\u202e"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page carries %q as sent", bad)
		}
	}
	for _, n := range []string{"-1", "0", "abc", "99999999999999999999", "1e9", "64", "%00"} {
		code, body := get(t, "http://"+s.httpAddr+"/debug/top?n="+n)
		var top struct {
			Limits []struct {
				Keys []json.RawMessage `json:"keys"`
			} `json:"limits"`
		}
		if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil || len(top.Limits) != 1 || len(top.Limits[0].Keys) > 64 {
			t.Errorf("/debug/top?n=%s: %d, %v, %d limits", n, code, err, len(top.Limits))
		}
		if !utf8.ValidString(body) {
			t.Errorf("/debug/top?n=%s is not valid UTF-8", n)
		}
	}
	for _, q := range []string{"?part=main", "?part=%3Cscript%3E", "?part=" + strings.Repeat("m", 4000)} {
		if code, _ := get(t, "http://"+s.httpAddr+"/"+q); code != 200 {
			t.Errorf("/%s = %d", q, code)
		}
	}
}
