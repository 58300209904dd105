package simulate

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

func TestReadCSV(t *testing.T) {
	long := strings.Repeat("v", limiter.MaxValueLen+1)
	ip := func(v string) []config.Entry { return []config.Entry{{Key: "remote_address", Value: v}} }
	tests := []struct {
		name string
		in   string
		want []Request
	}{
		{"seconds, cost given and missing", "0,remote_address=a,2\n12.345,remote_address=b\n", []Request{
			{Time: 0, Entries: ip("a"), Cost: 2},
			{Time: 12_345_000, Entries: ip("b"), Cost: 1},
		}},
		{"header and empty cost", "time,entries,cost\n1.5,remote_address=a,\n", []Request{
			{Time: 1_500_000, Entries: ip("a"), Cost: 1},
		}},
		{"header without cost column", "Time,Entries\n.25,remote_address=a\n", []Request{
			{Time: 250_000, Entries: ip("a"), Cost: 1},
		}},
		{"decimal exact to the microsecond", "1767225600.000001,remote_address=a\n3.1234569,remote_address=b\n", []Request{
			{Time: 1_767_225_600_000_001, Entries: ip("a"), Cost: 1},
			{Time: 3_123_456, Entries: ip("b"), Cost: 1}, // digits past µs dropped
		}},
		{"RFC 3339", "2026-01-01T00:00:00Z,remote_address=a\n2026-01-01T01:00:00.5+01:00,remote_address=b,3\n", []Request{
			{Time: 1_767_225_600_000_000, Entries: ip("a"), Cost: 1},
			{Time: 1_767_225_600_500_000, Entries: ip("b"), Cost: 3},
		}},
		{"several entries, '=' in a value, empty value, quoted comma", "1,\"remote_address=a;path=/x?q=1,2;tag=\"\n", []Request{
			{Time: 1_000_000, Cost: 1, Entries: []config.Entry{{Key: "remote_address", Value: "a"}, {Key: "path", Value: "/x?q=1,2"}, {Key: "tag", Value: ""}}},
		}},
		{"comments, blank lines, spaces", "# a trace\n\n 2 , remote_address=a , 4 \n", []Request{
			{Time: 2_000_000, Entries: ip("a"), Cost: 4},
		}},
		{"a value past MaxValueLen, kept to be matched as the server matches it", "1,remote_address=" + long + "\n", []Request{
			{Time: 1_000_000, Entries: ip(long), Cost: 1},
		}},
		{"cost, duration and refund", "1,remote_address=a,4000,2.5,2800\n2,remote_address=a,3,1\n3,remote_address=a,,,\n", []Request{
			{Time: 1_000_000, Entries: ip("a"), Cost: 4000, Duration: 2_500_000, Refund: 2800},
			{Time: 2_000_000, Entries: ip("a"), Cost: 3, Duration: 1_000_000}, // the cost kept beside a duration
			{Time: 3_000_000, Entries: ip("a"), Cost: 1},
		}},
		{"empty file", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadCSV("trace.csv", strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ReadCSV: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadCSV = %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestReadCSVErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // one per bad line, in order
	}{
		{"bad time", "1,a=b\nsoon,a=b\n", []string{`trace.csv:2: time "soon": want seconds`}},
		{"negative time", "-1,a=b\n", []string{`trace.csv:1: time "-1"`}},
		{"empty time", ",a=b\n", []string{"trace.csv:1: time is empty"}},
		{"header only on the first line", "time,entries\ntime,entries\n", []string{`trace.csv:2: time "time"`}},
		{"no entries", "1,\n", []string{"trace.csv:1: entries are empty"}},
		{"entry without =", "1,a=b;c\n", []string{`trace.csv:1: entry 2 "c": want key=value`}},
		{"empty key", "1,=b\n", []string{`trace.csv:1: entry 1 "=b": empty key`}},
		{"trailing ;", "1,a=b;\n", []string{`trace.csv:1: entry 2 "": want key=value`}},
		{"cost zero", "1,a=b,0\n", []string{`trace.csv:1: cost "0": want an integer from 1`}},
		{"cost not a number", "1,a=b,x\n", []string{`trace.csv:1: cost "x"`}},
		{"too few columns", "1\n", []string{"trace.csv:1: 1 columns; want time,entries[,cost[,duration[,refund]]]"}},
		{"too many columns", "1,a=b,1,2,3,4\n", []string{"trace.csv:1: 6 columns"}},
		{"refund above the cost", "1,a=b,2,1,3\n", []string{`trace.csv:1: refund "3": want an integer from 0 to the cost (2)`}},
		{"negative refund", "1,a=b,2,1,-1\n", []string{`trace.csv:1: refund "-1"`}},
		{"a negative duration", "1,a=b,1,-2\n", []string{"trace.csv:1: duration \"-2\""}},
		{"bad quote", "1,\"a=b\n", []string{"trace.csv:1:"}},
		{"every bad line, good ones skipped", "x,a=b\n1,a=b\n2,a=b,-1\n3,\n", []string{
			"trace.csv:1: time", "trace.csv:3: cost", "trace.csv:4: entries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadCSV("trace.csv", strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("ReadCSV = %v; want errors %q", got, tt.want)
			}
			var lines []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var le *LineError
				if !errors.As(e, &le) {
					t.Errorf("error %v is not a *LineError", e)
				}
				lines = append(lines, e.Error())
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("errors %q; want %d like %q", lines, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d = %q; want it to start %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestReadCSVStopsAfterTwentyBadLines(t *testing.T) {
	_, err := ReadCSV("t.csv", strings.NewReader(strings.Repeat("x,a=b\n", 50)))
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	if len(errs) != maxLineErrors+1 || !strings.Contains(errs[maxLineErrors].Error(), "first 20 bad lines only") {
		t.Errorf("%d errors, last %v; want %d line errors and a note", len(errs), errs[len(errs)-1], maxLineErrors)
	}
}
