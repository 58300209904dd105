package simulate

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/sluicehq/sluice/pkg/config"
)

// Check loads a config file or directory as the server would (config.Load)
// and returns its resolved limits as a table: what a CI job runs before a
// deploy. An invalid config returns the loader's error unchanged, each
// problem as "file:line: reason".
func Check(path string) (string, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", err
	}
	return LimitTable(cfg), nil
}

// LimitTable formats cfg's limits, one row each, in the order Limits gives
// them, with every default resolved: the multiplier, the algorithm and the
// burst are shown whether the file wrote them or not. Columns that do not
// apply to a row read "-".
func LimitTable(cfg *config.Config) string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tPATH\tNAME\tREQUESTS_PER_UNIT\tUNIT\tMULTIPLIER\tALGORITHM\tBURST\tSHADOW\tUNLIMITED\tDEFINED AT")
	for _, l := range cfg.Limits() {
		rl := l.RateLimit
		rpu, unit, mult, alg, burst := "-", "-", "-", "-", "-"
		if !rl.Unlimited {
			rpu = strconv.FormatUint(uint64(rl.RequestsPerUnit), 10)
			unit = rl.Unit.String()
			mult = strconv.FormatUint(uint64(rl.UnitMultiplier), 10)
			alg = rl.Algorithm.String()
			if rl.HasBurst() {
				burst = strconv.FormatUint(uint64(rl.Burst), 10)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%t\t%s:%d\n",
			cell(l.Domain), cell(l.Path), cell(rl.Name), rpu, unit, mult, alg, burst, l.ShadowMode, rl.Unlimited, l.File, l.Line)
	}
	tw.Flush() // a strings.Builder never fails
	return sb.String()
}

// cell shows a config string in one table cell: quoted when a space, tab
// or newline in it would shift the columns, "-" when empty.
func cell(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return strconv.Quote(s)
	}
	return s
}
