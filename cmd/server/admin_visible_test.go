package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestAdminShowsInvisible: a value holding characters a reader would not
// see (a right-to-left override, a zero width space, a line separator...)
// is shown with each one escaped visibly, the same on the admin page and
// in /debug/top's JSON, and never as sent. The finding: admin\u202Etxt.exe
// showed as adminexe.txt and acme\u200B as acme, so refusals could be
// blamed on another tenant.
func TestAdminShowsInvisible(t *testing.T) {
	s := startServer(t, "-config", writeConfig(t, testConfig))
	ctx := context.Background()
	cases := []struct{ sent, shown string }{
		{"admin\u202etxt.exe", `client=admin\u202etxt.exe`},
		{"acme\u200b", `client=acme\u200b`},
		{"a\u2028b", `client=a\u2028b`},
		{"\ufeffbom", `client=\ufeffbom`},
		{"\u2066iso\u2069", `client=\u2066iso\u2069`},
		{"acme ", `client=acme\u0020`},
		{`acme\u200b`, `client=acme\\u200b`}, // the escape sent as text
	}
	for _, c := range cases {
		for range 4 { // 3 admitted, then refused
			if _, err := s.client.ShouldRateLimit(ctx, request(c.sent)); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, body := get(t, "http://"+s.httpAddr+"/debug/top")
	var top struct {
		Limits []struct {
			Keys []struct {
				Key string `json:"key"`
			} `json:"keys"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top.Limits) != 1 {
		t.Fatalf("/debug/top: %v: %s", err, body)
	}
	keys := map[string]bool{}
	for _, k := range top.Limits[0].Keys {
		keys[k.Key] = true
	}
	_, page := get(t, "http://"+s.httpAddr+"/")
	for _, c := range cases {
		if !keys[c.shown] {
			t.Errorf("/debug/top lacks %s (sent %+q); keys: %q", c.shown, c.sent, top.Limits[0].Keys)
		}
		if !strings.Contains(page, `<td class="key">`+c.shown+`</td>`) {
			t.Errorf("the page lacks %s (sent %+q)", c.shown, c.sent)
		}
	}
	for _, r := range []string{"\u202e", "\u200b", "\u2028", "\ufeff", "\u2066", "\u2069"} {
		if strings.Contains(page, r) || strings.Contains(body, r) || strings.Contains(strings.Join(mapKeys(keys), ""), r) {
			t.Errorf("%+q reached the page or /debug/top as sent", r)
		}
	}
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
