package simulate

import (
	"strings"
	"testing"
	"time"
)

func TestAccuracyKnownTraces(t *testing.T) {
	opts := AccuracyOptions{Limit: 2, Window: 10 * time.Second, Duration: 20 * time.Second}
	tests := []struct {
		name        string
		trace       []Request
		overLimit   int64
		independent Disagreement // counts only
		sameHistory Disagreement
		net         Disagreement
	}{
		{
			// 2 per 10 s, windows [0,10) and [10,20); the log counts a hit
			// while it is less than 10 s old.
			//   10.5: estimate 2·0.95 + 1 > 2, limited; the log holds 9 only.
			//         Wrongly limited, both ways.
			//   15:   estimate 2·0.5 + 1 = 2, admitted. The independent log
			//         holds 9 and 10.5: over, wrongly admitted. The sliding
			//         window's own history holds 9 only: right.
			//   19.5: estimate 2·0.05 + 1 + 1 > 2, limited. The independent
			//         log holds 10.5, its history 15: both wrongly limited.
			name:        "the estimate limits early",
			trace:       at(0, 9, 10.5, 15, 19.5),
			overLimit:   1,
			independent: Disagreement{WronglyAdmitted: 1, WronglyLimited: 2},
			sameHistory: Disagreement{WronglyAdmitted: 0, WronglyLimited: 2},
			// The sliding window admitted 0, 9, 15; the log 0, 9, 10.5, 19.5.
			net: Disagreement{WronglyLimited: 1},
		},
		{
			//   10: estimate 2·1 + 1 > 2, limited, rightly.
			//   15: estimate 2·0.5 + 1 = 2, admitted, but 9 and 9.5 are still
			//       inside the last 10 s: wrongly admitted, both ways.
			name:        "the estimate admits a burst late in the last window",
			trace:       at(9, 9.5, 10, 15),
			overLimit:   2,
			independent: Disagreement{WronglyAdmitted: 1},
			sameHistory: Disagreement{WronglyAdmitted: 1},
			net:         Disagreement{WronglyAdmitted: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Accuracy(tt.trace, opts)
			if err != nil {
				t.Fatal(err)
			}
			counts := func(d Disagreement) Disagreement {
				return Disagreement{WronglyAdmitted: d.WronglyAdmitted, WronglyLimited: d.WronglyLimited}
			}
			if rep.Requests != int64(len(tt.trace)) || rep.Clients != 1 || rep.OverLimit != tt.overLimit {
				t.Errorf("requests %d, clients %d, over limit %d; want %d, 1, %d", rep.Requests, rep.Clients, rep.OverLimit, len(tt.trace), tt.overLimit)
			}
			if got := counts(rep.Independent); got != tt.independent {
				t.Errorf("independent %+v; want %+v", got, tt.independent)
			}
			if got := counts(rep.SameHistory); got != tt.sameHistory {
				t.Errorf("same history %+v; want %+v", got, tt.sameHistory)
			}
			if got := counts(rep.Net); got != tt.net {
				t.Errorf("net %+v; want %+v", got, tt.net)
			}
			wantPct := 100 * float64(tt.sameHistory.WronglyAdmitted) / float64(len(tt.trace))
			if rep.SameHistory.WronglyAdmittedPercent != wantPct {
				t.Errorf("same history wrongly admitted %.2f%%; want %.2f%%", rep.SameHistory.WronglyAdmittedPercent, wantPct)
			}
		})
	}
}

func TestAccuracyBands(t *testing.T) {
	// 2 per 10 s over 20 s is 4 hits at a load of 1. The first client
	// sends 5 (1.25, band [1.1, 2)), the second 1 (0.25, band [0, 0.5)).
	trace := append(at(0, 9, 10.5, 15, 19.5), Request{Time: 3e6, Entries: ClientEntries("remote_address", 1)})
	rep, err := Accuracy(trace, AccuracyOptions{Limit: 2, Window: 10 * time.Second, Duration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type band struct {
		low, high                     float64
		clients, requests, wrongLimit int64
	}
	want := []band{{0, 0.5, 1, 1, 0}, {0.5, 0.9, 0, 0, 0}, {0.9, 1.1, 0, 0, 0}, {1.1, 2, 1, 5, 2}, {2, 0, 0, 0, 0}}
	for i, b := range rep.Bands {
		got := band{b.Low, b.High, b.Clients, b.Requests, b.SameHistory.WronglyLimited}
		if got != want[i] {
			t.Errorf("band %d = %+v; want %+v", i, got, want[i])
		}
	}
	if rep.Clients != 2 || rep.Requests != 6 {
		t.Errorf("%d clients, %d requests; want 2, 6", rep.Clients, rep.Requests)
	}
}

func TestAccuracyManyClients(t *testing.T) {
	// Clients drawn around their limit produce disagreements, and the
	// clients far below it produce none. "Far" depends on the limit: a
	// Poisson client averaging 5 a minute sends 10 in some minute often
	// enough, one averaging 50 sends 100 practically never.
	trace, err := Generate(Pattern{Kind: Many, Duration: 5 * time.Minute, Rate: 100.0 / 60, Clients: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Accuracy(trace, AccuracyOptions{Limit: 100, Window: time.Minute, Duration: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OverLimit == 0 || rep.SameHistory.WronglyAdmitted+rep.SameHistory.WronglyLimited == 0 {
		t.Errorf("over limit %d, disagreements %+v; want some of each", rep.OverLimit, rep.SameHistory)
	}
	if low := rep.Bands[0]; low.Clients == 0 || low.OverLimit != 0 || low.SameHistory != (Disagreement{}) {
		t.Errorf("clients below half their limit: %+v; want some clients, never over the limit, no disagreement", low)
	}
}

func TestAccuracyErrors(t *testing.T) {
	for _, tt := range []struct {
		trace []Request
		opts  AccuracyOptions
		want  string
	}{
		{at(1), AccuracyOptions{Limit: 0, Window: time.Second}, "limit 0 per 1s"},
		{at(1), AccuracyOptions{Limit: 10001, Window: time.Second}, "want 1 to 10000"},
		{at(1), AccuracyOptions{Limit: 1}, "limit 1 per 0s"},
		{nil, AccuracyOptions{Limit: 1, Window: time.Second}, "empty trace"},
	} {
		if _, err := Accuracy(tt.trace, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Accuracy(%+v) = %v; want an error containing %q", tt.opts, err, tt.want)
		}
	}
}
