package main

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/tools/simulate"
)

const checkSynopsis = `Usage: simulate check PATH...

Loads each PATH (a config file, or a directory of them read as the server
reads one) and prints its resolved limits. Exits 1 if any is invalid, with
each problem as file:line: reason on stderr, 0 otherwise. Flags:
`

func checkCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", checkSynopsis, stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(stderr, "check", "name at least one config file or directory")
	}
	code := exitOK
	for i, path := range fs.Args() {
		table, err := simulate.Check(path)
		if err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			code = exitError
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s: ok\n%s", path, table)
	}
	return code
}
