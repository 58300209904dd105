// Command simulate tunes descriptor configs offline: it replays a trace (a
// CSV file or a generated pattern) against a config under the configured
// algorithm or another, compares two algorithms on the same requests,
// plots offered against admitted, checks configs before a deploy, and
// measures how far sliding_window strays from the exact sliding_log.
//
// The work is internal/tools/simulate's; this command reads flags and prints. See
// README.md beside this file, and -h of each subcommand.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // an invalid config or trace, or a run that failed
	exitUsage = 2
)

const usage = `Usage:
  simulate run -config PATH [-domain D] (-trace FILE.csv | -pattern NAME) [flags]
      replay a trace against a config and report each limit
  simulate check PATH...
      validate config files or directories and print their resolved limits
  simulate accuracy [-clients 1000 -duration 10m -seed 1 -limit 100 -window 1m]
      measure how often sliding_window decides differently from sliding_log

Run "simulate SUBCOMMAND -h" for a subcommand's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:], stdout, stderr)
	case "check":
		return checkCommand(args[1:], stdout, stderr)
	case "accuracy":
		return accuracyCommand(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "simulate: unknown subcommand %q\n\n%s", args[0], usage)
	return exitUsage
}

// newFlagSet returns a flag set for a subcommand whose usage text is
// synopsis followed by the flags.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("simulate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, reporting whether to go on and, if not, the exit
// code: 0 after -h, 2 after a bad flag (the flag package has said why).
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// usageError reports a flag problem the flag package cannot see.
func usageError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "simulate %s: %s\n", cmd, fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run \"simulate %s -h\" for usage.\n", cmd)
	return exitUsage
}
