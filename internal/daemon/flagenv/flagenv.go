// Package flagenv lets every command-line flag also be set from an
// environment variable: -grpc-addr from SLUICE_GRPC_ADDR. A flag given on
// the command line wins over the environment, which wins over the default.
// It also says how a value may be shown in an error or a log line
// (Redacted), since a value may carry a password.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Name is the environment variable for a flag: prefix + upper snake case.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets each flag not given on the command
// line from its environment variable, looked up with getenv. A value a
// flag refuses is shown redacted, in the error and in what fs prints.
func Parse(fs *flag.FlagSet, args []string, prefix string, getenv func(string) string) error {
	if err := parseRedacted(fs, args); err != nil {
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
				err = SetError(env, v, e)
			}
		}
	})
	return err
}

// parseRedacted is fs.Parse(args), with the arguments that may carry
// credentials (Redacted changes them) redacted where the flag package
// quotes them: "invalid value ... for flag", printed and returned.
func parseRedacted(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var printed strings.Builder
	fs.SetOutput(&printed)
	err := fs.Parse(args)
	fs.SetOutput(out)
	redact := func(s string) string {
		for _, a := range args {
			if r := Redacted(a); r != a {
				s = strings.ReplaceAll(s, a, r)
				s = strings.ReplaceAll(s, strconv.Quote(a), strconv.Quote(r))
			}
		}
		return s
	}
	io.WriteString(out, redact(printed.String()))
	if err != nil && redact(err.Error()) != err.Error() {
		return errors.New(redact(err.Error()))
	}
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

// Redacted is s as an error or a log line may show it: with any
// credentials in it replaced by xxxxx. Everything between the first
// "://" (or the start) and the last "@" goes, which covers
// scheme://user:password@host in a URL that parses and in one that does
// not (a password with an unescaped / or @ in it, a URL inside a URL),
// a list of them, and user:password@host:port; and so does the value of
// a password= query parameter, which the reference's Redis client reads.
func Redacted(s string) string {
	if at := strings.LastIndex(s, "@"); at >= 0 {
		start := 0
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			start = i + len("://")
		}
		s = s[:start] + "xxxxx" + s[at:]
	}
	return passwordParam.ReplaceAllString(s, "${1}xxxxx")
}

var passwordParam = regexp.MustCompile(`(?i)(password=)[^&#]*`)

// SetError is the error for a value that what (a variable or a flag)
// refused with err. A value that may carry credentials is shown redacted,
// and err, which may quote it, is left out.
func SetError(what, value string, err error) error {
	if Redacted(value) != value {
		return fmt.Errorf("%s=%s: not a valid value", what, Redacted(value))
	}
	return fmt.Errorf("%s=%q: %w", what, value, err)
}
