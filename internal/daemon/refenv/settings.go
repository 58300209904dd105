package refenv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Unhonoured is what a daemon does when one of the reference's variables
// is set to a value it does not honour.
type Unhonoured int

const (
	// Warn: the daemon starts, and logs once that the variable is
	// ignored. It changes how sluice runs, not who may connect to it, nor
	// how sluice proves itself or checks others (the zero value).
	Warn Unhonoured = iota
	// Refuse: the daemon does not start. Ignoring the variable would
	// weaken TLS, a check of client names or authentication, or open a
	// port the reference keeps closed.
	Refuse
)

// Setting is one of the reference's environment variables, or a group of
// them (a name ending in *).
//
// A plain value, safe to share between goroutines.
type Setting struct {
	Var string
	// Flags are the sluice flags it sets, none when it does not apply. A
	// daemon that takes them all honours it.
	Flags []string
	// Same are values with which the reference does what sluice does
	// anyway (USE_STATSD=false): honoured with no flag. Compared without
	// case, booleans as booleans; "*" is any value.
	Same []string
	// Unhonoured is what a daemon does when the variable is set to
	// another value and it does not take Flags (all of them).
	Unhonoured Unhonoured
	// Part, when set, is a flag only the daemons concerned take
	// (redis-url: the server, which has Redis); where it is missing the
	// setting only warns, whatever Unhonoured says.
	Part string
	// Note says how it maps, or why it does not apply.
	Note string
}

// refused, forRedis and inert are Settings' shorthands: Refuse, Part
// redis-url, and Same.
func (s Setting) refused() Setting          { s.Unhonoured = Refuse; return s }
func (s Setting) forRedis() Setting         { s.Part = "redis-url"; return s }
func (s Setting) inert(v ...string) Setting { s.Same = v; return s }

// same reports whether v is one of Same.
func (s Setting) same(v string) bool {
	return slices.ContainsFunc(s.Same, func(x string) bool { return sameValue(x, v) })
}

func sameValue(a, b string) bool {
	if a == "*" {
		return true
	}
	x, errx := strconv.ParseBool(a)
	y, erry := strconv.ParseBool(b)
	if errx == nil && erry == nil {
		return x == y
	}
	return strings.EqualFold(a, b)
}

// vars are the reference's variables s stands for: itself, or its group's.
func (s Setting) vars() []string {
	prefix, group := strings.CutSuffix(s.Var, "*")
	var out []string
	for _, v := range referenceVars() {
		if v == s.Var || (group && strings.HasPrefix(v, prefix)) {
			out = append(out, v)
		}
	}
	return out
}

// WhenSet says what a daemon does with the variable set: honours it,
// warns or refuses to start (the README table's last column).
func (s Setting) WhenSet() string {
	var part string
	if s.Part != "" {
		part = fmt.Sprintf(" (the sidecar, without `-%s`, warns)", s.Part)
	}
	switch {
	case len(s.Flags) > 0:
		return "honoured" + part
	case slices.Equal(s.Same, []string{"*"}):
		return "honoured: sluice does it by itself"
	}
	out := "warns"
	if s.Unhonoured == Refuse {
		out = "**stops start-up**" + part
	}
	if len(s.Same) > 0 {
		var same []string
		for _, v := range s.Same {
			same = append(same, "`"+v+"`")
		}
		out += ", unless " + strings.Join(same, " or ")
	}
	return out
}

// Row is the setting's row in the README's table.
func (s Setting) Row() string {
	flags := "–"
	if len(s.Flags) > 0 {
		var f []string
		for _, n := range s.Flags {
			f = append(f, "`-"+n+"`")
		}
		flags = strings.Join(f, ", ")
	}
	return fmt.Sprintf("| `%s` | %s | %s | %s |", s.Var, flags, s.Note, s.WhenSet())
}
