package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"
)

// walker reads one file's YAML tree. It stops at the first error: one clear
// error per file reads better than a cascade caused by the first.
type walker struct {
	file   string
	budget *int // nodes the config has left, shared by its files
}

func (w *walker) errorf(n *yaml.Node, format string, args ...any) *Error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: w.file, Line: line, Reason: fmt.Sprintf(format, args...)}
}

// resolve follows aliases and charges the node to the config's budget. The
// walk expands aliases and merge keys, which a hostile file can use to make
// a small document enormous ("billion laughs") or to refer to itself:
// MaxNodes and MaxDepth bound the work and the recursion, MaxScalarBytes
// every string read.
func (w *walker) resolve(n *yaml.Node) (*yaml.Node, error) {
	for hops := 0; n.Kind == yaml.AliasNode; hops++ {
		if n.Alias == nil || hops > MaxDepth {
			return nil, w.errorf(n, "unresolvable alias *%s", Clip(n.Value))
		}
		n = n.Alias
	}
	if *w.budget--; *w.budget < 0 {
		return nil, w.errorf(n, "config too large: more than %d YAML nodes in all its files once aliases are expanded", MaxNodes)
	}
	if n.Kind == yaml.ScalarNode && len(n.Value) > MaxScalarBytes {
		return nil, w.errorf(n, "a string of %d bytes, %s: the most is %d", len(n.Value), Quote(n.Value), MaxScalarBytes)
	}
	return n, nil
}

// field is one key: value pair of a mapping.
type field struct {
	key, val *yaml.Node
}

// fields returns the pairs of a mapping whose keys must all be in allowed,
// with YAML merge keys (<<: *anchor) applied: explicit keys win over merged
// ones and earlier merge sources over later ones, as the YAML merge spec
// (and yaml.v2, which the reference uses) has it. what names the mapping in
// errors.
func (w *walker) fields(n *yaml.Node, what string, allowed []string, depth int) (map[string]field, error) {
	if depth > MaxDepth {
		return nil, w.errorf(n, "merge keys nested more than %d deep", MaxDepth)
	}
	n, err := w.resolve(n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, w.errorf(n, "%s must be a mapping, got %s", what, kindName(n))
	}
	out := make(map[string]field, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := w.resolve(n.Content[i])
		if err != nil {
			return nil, err
		}
		v := n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, w.errorf(k, "%s has a %s as a field name", what, kindName(k))
		}
		if !slices.Contains(allowed, k.Value) {
			return nil, w.errorf(k, "unknown field %s in %s (want %s)", Quote(k.Value), what, strings.Join(allowed, ", "))
		}
		if prev, dup := out[k.Value]; dup {
			return nil, w.errorf(k, "field %s given twice in %s (first at line %d)", Quote(k.Value), what, prev.key.Line)
		}
		out[k.Value] = field{key: k, val: v}
	}
	for _, m := range merges {
		m, err := w.resolve(m)
		if err != nil {
			return nil, err
		}
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			merged, err := w.fields(src, what, allowed, depth+1)
			if err != nil {
				return nil, err
			}
			for _, name := range allowed { // a fixed order keeps errors deterministic
				if f, ok := merged[name]; ok {
					if _, set := out[name]; !set {
						out[name] = f
					}
				}
			}
		}
	}
	return out, nil
}

// seq returns a sequence's items; null means an empty list.
func (w *walker) seq(n *yaml.Node, what string) ([]*yaml.Node, error) {
	n, err := w.resolve(n)
	if err != nil {
		return nil, err
	}
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, w.errorf(n, "%s must be a list, got %s", what, kindName(n))
	}
	return n.Content, nil
}

// str reads a string field. Any scalar is accepted as its text, as yaml.v2
// does for the reference's string fields: `value: 2061234567` is the string
// "2061234567". Null reads as "", meaning not set.
func (w *walker) str(n *yaml.Node, what string) (string, error) {
	n, err := w.resolve(n)
	if err != nil {
		return "", err
	}
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", w.errorf(n, "%s must be a string, got %s", what, kindName(n))
	}
	return n.Value, nil
}

// label reads a string that names something: a domain, a descriptor's key
// or value, a limit. Names reach response headers, logs and metric labels,
// so a control character (a newline, NUL, an escape) is refused here
// rather than carried there.
func (w *walker) label(n *yaml.Node, what string) (string, error) {
	s, err := w.str(n, what)
	if err != nil {
		return "", err
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		r := []rune(s[i:])[0]
		return "", w.errorf(n, "%s %s holds a control character (%U at byte %d)", what, Quote(s), r, i)
	}
	return s, nil
}

// boolean reads a boolean field. Besides YAML 1.2's true/false it accepts
// the unquoted YAML 1.1 words yes/no/on/off, because the reference's yaml.v2
// reads them as booleans and existing files may use them.
func (w *walker) boolean(n *yaml.Node, what string) (bool, error) {
	n, err := w.resolve(n)
	if err != nil {
		return false, err
	}
	if isNull(n) {
		return false, nil
	}
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!bool" {
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, nil
			}
		}
		if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
			switch strings.ToLower(n.Value) {
			case "yes", "on", "y":
				return true, nil
			case "no", "off", "n":
				return false, nil
			}
		}
	}
	return false, w.errorf(n, "%s must be true or false, got %s", what, kindName(n))
}

// integer reads a non-negative integer field that fits a uint32. The caller
// has checked that the field is set.
func (w *walker) integer(n *yaml.Node, what string) (uint32, error) {
	n, err := w.resolve(n)
	if err != nil {
		return 0, err
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, w.errorf(n, "%s must be an integer, got %s", what, kindName(n))
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		return 0, w.errorf(n, "%s must be at most %d, got %s", what, uint32(math.MaxUint32), Clip(n.Value))
	}
	if i < 0 {
		return 0, w.errorf(n, "%s must not be negative, got %d", what, i)
	}
	if i > math.MaxUint32 {
		return 0, w.errorf(n, "%s must be at most %d, got %d", what, uint32(math.MaxUint32), i)
	}
	return uint32(i), nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName describes a node for "must be X, got Y" errors.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "the string " + Quote(n.Value)
		case "!!null":
			return "null"
		case "!!int":
			return "the integer " + Clip(n.Value)
		case "!!float":
			return "the number " + Clip(n.Value)
		case "!!bool":
			return "the boolean " + Clip(n.Value)
		}
		return Quote(n.Value)
	}
	return "an empty document"
}

// yamlError turns a yaml.v3 syntax error ("yaml: line 3: did not find
// expected key") into an *Error at that line.
func yamlError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, reason, ok := strings.Cut(rest, ": "); ok {
			if n, convErr := strconv.Atoi(num); convErr == nil {
				line, msg = n, reason
			}
		}
	}
	return &Error{File: file, Line: line, Reason: "invalid YAML: " + msg}
}

// value reads any YAML value as the JSON-like Go value protobuf's Struct
// takes (map[string]any, []any, string, float64, bool or nil), charging
// every node to the config's budget: descriptor metadata, which sluice
// carries but does not interpret. Mapping keys must be scalars.
func (w *walker) value(n *yaml.Node, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, w.errorf(n, "metadata nested more than %d deep", MaxDepth)
	}
	n, err := w.resolve(n)
	if err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, err := w.resolve(n.Content[i])
			if err != nil {
				return nil, err
			}
			if k.Kind != yaml.ScalarNode {
				return nil, w.errorf(k, "metadata has a %s as a field name", kindName(k))
			}
			if m[k.Value], err = w.value(n.Content[i+1], depth+1); err != nil {
				return nil, err
			}
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := w.value(c, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, w.errorf(n, "metadata: %v", err)
	}
	switch x := v.(type) {
	case int:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case nil, bool, float64, string:
		return x, nil
	}
	return n.Value, nil // timestamps and other tagged scalars: their text
}
