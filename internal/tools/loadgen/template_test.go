package loadgen

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		text  string
		index int
		want  [][][2]string // descriptors → entries → key, value
	}{
		{"remote_address=client-%d", 7, [][][2]string{{{"remote_address", "client-7"}}}},
		{"generic_key=api;remote_address=%d,path=/login", 42,
			[][][2]string{{{"generic_key", "api"}}, {{"remote_address", "42"}, {"path", "/login"}}}},
		{"k%d=v%d-%d", 3, [][][2]string{{{"k3", "v3-3"}}}},
		{"pct=100%%;empty=", 0, [][][2]string{{{"pct", "100%"}}, {{"empty", ""}}}},
		{" a = b , c=d=e ", 1, [][][2]string{{{"a", " b"}, {"c", "d=e"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			tmpl, err := ParseTemplate(tt.text)
			if err != nil {
				t.Fatalf("ParseTemplate(%q) = %v", tt.text, err)
			}
			req := tmpl.Request("dom", 3, tt.index)
			if req.GetDomain() != "dom" || req.GetHitsAddend() != 3 {
				t.Fatalf("domain, hits = %q, %d; want dom, 3", req.GetDomain(), req.GetHitsAddend())
			}
			var got [][][2]string
			for _, d := range req.GetDescriptors() {
				var es [][2]string
				for _, e := range d.GetEntries() {
					es = append(es, [2]string{e.GetKey(), e.GetValue()})
				}
				got = append(got, es)
			}
			if !equalDescs(got, tt.want) {
				t.Fatalf("Request(%d) descriptors = %q; want %q", tt.index, got, tt.want)
			}
		})
	}
}

func equalDescs(a, b [][][2]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func TestParseTemplateErrors(t *testing.T) {
	tests := []struct {
		text, wantErr string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"a=1;;b=2", "descriptor 2 is empty"},
		{"a=1;", "descriptor 2 is empty"},
		{"remote_address", "not key=value"},
		{"a=1,,b=2", "not key=value"},
		{"=value", "empty key"},
		{"a=%s", "unknown verb %s"},
		{"a=50%", "lone %"},
		{"k%x=1", "unknown verb %x"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := ParseTemplate(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseTemplate(%q) = %v; want an error containing %q", tt.text, err, tt.wantErr)
			}
		})
	}
}

func TestRequestSetCachesUpToBound(t *testing.T) {
	tmpl, err := ParseTemplate("remote_address=client-%d")
	if err != nil {
		t.Fatal(err)
	}
	rs := newRequestSet(tmpl, "d", 0, 100, 10)
	if len(rs.cached) != 10 {
		t.Fatalf("cached %d requests; want the bound, 10", len(rs.cached))
	}
	if rs.get(3) != rs.get(3) {
		t.Errorf("get(3) built a new request; want the cached one")
	}
	if rs.get(50) == rs.get(50) {
		t.Errorf("get(50) returned a shared request beyond the cache bound")
	}
	for _, i := range []int{3, 50} {
		if got, want := rs.get(i), tmpl.Request("d", 0, i); !proto.Equal(got, want) {
			t.Errorf("get(%d) = %v; want %v", i, got, want)
		}
	}
}

func BenchmarkRequestBuild(b *testing.B) {
	tmpl, err := ParseTemplate("generic_key=api;remote_address=client-%d,path=/login")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := range b.N {
		_ = tmpl.Request("d", 0, i)
	}
}
