package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/tools/simulate"
)

// writeRunText prints each run's per-limit table, then the disagreements.
// Limits the trace never matched are counted, not listed. The worst spans
// are per key, so they read against the limit's rate.
func writeRunText(w io.Writer, source string, runs []*simulate.Result, cmp *simulate.Comparison) error {
	first := runs[0]
	fmt.Fprintf(w, "%s: %d requests in domain %s, %d matched no limit\n", source, first.Requests, first.Domain, first.Unmatched)
	for _, r := range runs {
		fmt.Fprintf(w, "\nunder %s:\n", r.Algorithm)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "LIMIT\tALGORITHM\tRATE\tKEYS\tOFFERED\tADMITTED\tREJECTED\tWORST 1s\tWORST WINDOW")
		unseen := 0
		for _, l := range r.Limits {
			if l.Offered == 0 {
				unseen++
				continue
			}
			worstWindow := "-"
			if l.WindowMicros > 0 {
				worstWindow = strconv.FormatInt(l.WorstWindow, 10)
			}
			rejected := strconv.FormatInt(l.Rejected, 10)
			if l.ConcurrencyRejected > 0 {
				rejected += " (" + strconv.FormatInt(l.ConcurrencyRejected, 10) + " at once)"
			}
			admitted := strconv.FormatInt(l.Admitted, 10)
			if l.Refunded > 0 {
				admitted += " (" + strconv.FormatInt(l.Refunded, 10) + " units given back)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n",
				l.Path, algorithmOf(l), rate(l), l.Keys, l.Offered, admitted, rejected, l.WorstSecond, worstWindow)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		switch {
		case unseen == 1:
			fmt.Fprintln(w, "(1 more limit in the domain matched no request)")
		case unseen > 1:
			fmt.Fprintf(w, "(%d more limits in the domain matched no request)\n", unseen)
		}
	}
	if cmp == nil {
		return nil
	}
	fmt.Fprintf(w, "\ndisagreements, %s against %s (%% of the limit's offered requests):\n", cmp.A, cmp.B)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "LIMIT\tOFFERED\tONLY %s ADMITTED\t%%\tONLY %s ADMITTED\t%%\n", cmp.A, cmp.B)
	for _, lc := range slices.Concat(cmp.Limits, []simulate.LimitComparison{cmp.Total}) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%d\t%.3f\n", lc.Path, lc.Offered, lc.OnlyA, lc.OnlyAPercent, lc.OnlyB, lc.OnlyBPercent)
	}
	return tw.Flush()
}

func algorithmOf(l simulate.LimitReport) string {
	s := l.Algorithm
	switch {
	case l.Unlimited:
		s = "unlimited"
	case l.Shadow:
		s += " (shadow)" // decided and counted, but answered OK
	}
	return s
}

// rate describes the limit: "100/1m0s", with the burst where it differs.
func rate(l simulate.LimitReport) string {
	switch {
	case l.Unlimited:
		return "-"
	case l.RequestsPerUnit == 0:
		return "blocks all"
	}
	s := fmt.Sprintf("%d/%v", l.RequestsPerUnit, time.Duration(l.WindowMicros)*time.Microsecond)
	if l.Burst != 0 && l.Burst != l.RequestsPerUnit {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}
