package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/console"
	"github.com/sluicehq/sluice/pkg/topkeys"
	"github.com/sluicehq/sluice/pkg/wire"
)

// TestDebugTop: a client just refused shows at the top of its limit on
// /debug/top, with its refusals; a long value shows by digest.
func TestDebugTop(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	// The refusals expected are those the server answered, whatever the
	// limit's algorithm makes of the time the requests took.
	send := func(client string, n int) (refused int64) {
		for range n {
			resp, err := s.client.ShouldRateLimit(ctx, request(client))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
				refused++
			}
		}
		return refused
	}
	abuser := send("abuser", 10)
	long := send(strings.Repeat("x", 200), 5)
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
	if len(top.Limits) != 1 || top.Limits[0].Limit != "per-client" || top.Limits[0].Refused != abuser+long {
		t.Fatalf("/debug/top = %s; want per-client with %d refusals", body, abuser+long)
	}
	keys := top.Limits[0].Keys
	if keys[0].Key != "client=abuser" || keys[0].Count != abuser {
		t.Errorf("the top key: %+v; want client=abuser refused %d times", keys[0], abuser)
	}
	if len(keys) < 2 || !strings.HasPrefix(keys[1].Key, "client=sha256:") {
		t.Errorf("a 200-byte value: %+v; want it by digest", keys)
	}
}

// TestAdminPageHostile: what a hostile client controls reaches the admin
// page and /debug/top bounded and inert: values that are not UTF-8, are
// markup or are 1 KiB are shown escaped or by digest; however many
// distinct keys are refused, the page lists console.MaxTopKeys of them per
// limit, each at most topkeys.MaxKeyBytes, so the part of the page they
// fill is bounded by design (the page as a whole also charts requests per
// second, whose samples arrive on their own clock: comparing whole pages
// made this test fail once, 5,328 against 13,849 bytes); and /debug/top's
// n and the page's query take any value.
func TestAdminPageHostile(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	values := []string{"\xff\xfe", "<script>alert(1)</script>", `"><img src=x onerror=alert(1)>`, strings.Repeat("x", 1024), "a\x00b", "é\u202e"}
	// refused counts the refusals the server answered (4 requests a key
	// on 3 an hour: one each), whatever the limit's algorithm makes of the
	// time the run took.
	var refused int
	refuse := func(v string) {
		for range 4 { // 3 admitted, then refused
			// As Envoy sends them: bytes that are not UTF-8 as they came.
			resp := new(rlsv3.RateLimitResponse)
			err := s.conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
				request(v), resp, grpc.ForceCodecV2(wire.Codec{}))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
				refused++
			}
		}
	}
	for _, v := range values {
		refuse(v)
	}
	// page refuses keys from to to, then reads the page once it counts
	// them (it is rendered at most once per console.MaxAge).
	page := func(from, to int) string {
		for i := from; i < to; i++ {
			refuse(fmt.Sprint("client-", i, "-\xff"))
		}
		counted := fmt.Sprintf(`<span class="muted">%d refused</span>`, refused)
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := get(t, "http://"+s.httpAddr+"/")
			if code != 200 {
				t.Fatalf("/ = %d", code)
			}
			if strings.Contains(body, counted) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page never showed %s", counted)
			}
			time.Sleep(20 * time.Millisecond) // the polling interval
		}
	}
	// The top section's bound: a heading, and per key a row of fixed
	// cells and the key, each byte of which HTML escapes to at most 5.
	sectionBound := 1<<10 + console.MaxTopKeys*(256+5*topkeys.MaxKeyBytes)
	var body string
	for _, keys := range [][2]int{{0, 200}, {200, 1_200}} {
		body = page(keys[0], keys[1])
		top := body[strings.Index(body, `<section id="top">`):]
		top = top[:strings.Index(top, "</section>")]
		if n := strings.Count(top, `class="topkey"`); n != console.MaxTopKeys {
			t.Errorf("%d refused: %d listed; want console.MaxTopKeys, %d", refused, n, console.MaxTopKeys)
		}
		for _, cell := range strings.Split(top, `<td class="key">`)[1:] {
			if key := html.UnescapeString(cell[:strings.Index(cell, "</td>")]); len(key) > topkeys.MaxKeyBytes {
				t.Errorf("a key of %d bytes listed; want at most topkeys.MaxKeyBytes, %d", len(key), topkeys.MaxKeyBytes)
			}
		}
		if len(top) > sectionBound {
			t.Errorf("%d refused: the top section is %d bytes; want at most %d", refused, len(top), sectionBound)
		}
	}
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
