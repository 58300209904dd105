// Package flagenv lets every command-line flag also be set from an
// environment variable: -grpc-addr from SLUICE_GRPC_ADDR. A flag given on
// the command line wins over the environment, which wins over the default.
package flagenv

import (
	"flag"
	"fmt"
	"strings"
)

// Name is the environment variable for a flag: prefix + upper snake case.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets each flag not given on the command
// line from its environment variable, looked up with getenv.
func Parse(fs *flag.FlagSet, args []string, prefix string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		env := Name(prefix, f.Name)
		if v := getenv(env); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// List splits a comma-separated flag value into its non-empty items,
// trimmed of spaces.
func List(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
