package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The fields each mapping may have: the reference's (its validKeys), plus
// sluice's extensions under rate_limit.
var (
	fileFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
		"quota_mode", "share_threshold", "value_to_metric", "metadata"}
	rateLimitFields = []string{"unit", "requests_per_unit", "name", "unlimited", "replaces", "algorithm", "burst", "unit_multiplier", "count_refused", "calendar", "holder"}
	replacesFields  = []string{"name"}
)

// sourceFile is one input: name is what errors and Limit.File show, hashName
// what Version digests (Load passes base names, so a config's version does
// not depend on where it is mounted). tree, if set, gives the file's YAML
// tree, read in place of data, which Version still digests.
type sourceFile struct {
	name, hashName string
	data           []byte
	tree           func() *yaml.Node
}

// Document is one config file given as its YAML tree rather than its text,
// by a source that holds configs as data (an xDS resource). Tree returns
// the file's top-level mapping, as yaml.v3 would decode it; it is called
// once, when the document's turn comes, so that one tree at a time is held.
// Data is what the config's Version digests (the source's own bytes). The
// caller bounds what Tree builds; the walk charges its nodes to MaxNodes
// as it does a file's. ParseDocuments reads a Document from its calling
// goroutine only.
type Document struct {
	Name string
	Tree func() *yaml.Node
	Data []byte
}

// ParseDocuments builds a Config from documents as Parse does from files:
// the same rules, the same bounds, errors naming each by Name (and a line
// where its nodes carry one). It does not modify the trees.
func ParseDocuments(docs []Document) (*Config, error) {
	src := make([]sourceFile, 0, len(docs))
	for _, d := range docs {
		src = append(src, sourceFile{name: d.Name, hashName: d.Name, data: d.Data, tree: d.Tree})
	}
	return parse(src)
}

// Parse builds a Config from file contents keyed by file name, the names
// that errors and Limit.File carry. Files are read in name order. Each file
// holds one domain; a domain may not appear in two files. On failure the
// error is an *Error, or several joined with errors.Join (at most one per
// file, plus those found across files, and at most 10 in all: the rest
// are counted); use errors.As to inspect them. The caller bounds the
// files' sizes (LoadWith does).
func Parse(files map[string][]byte) (*Config, error) {
	src := make([]sourceFile, 0, len(files))
	for name, data := range files {
		src = append(src, sourceFile{name: name, hashName: name, data: data})
	}
	return parse(src)
}

func parse(files []sourceFile) (*Config, error) {
	if len(files) == 0 {
		return nil, errors.New("no config files")
	}
	slices.SortFunc(files, func(a, b sourceFile) int { return strings.Compare(a.name, b.name) })

	var errs []error
	c := &Config{domains: make(map[string]*level)}
	byName := make(map[string]*domainTree)
	budget := MaxNodes // for the whole config: aliases can make small files large
	for _, f := range files {
		t, err := parseFile(f, &budget)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev := byName[t.name]; prev != nil {
			errs = append(errs, &Error{File: t.file, Line: t.line,
				Reason: fmt.Sprintf("duplicate domain %s: already defined at %s", Quote(t.name), source(prev.file, prev.line))})
			continue
		}
		byName[t.name] = t
		c.trees = append(c.trees, t)
	}
	slices.SortFunc(c.trees, func(a, b *domainTree) int { return strings.Compare(a.name, b.name) })

	// Paths name limits in metrics and storage keys, so two limits must never
	// share one, even where the reference's key_value form is ambiguous.
	paths := make(map[string]*Limit)
	for _, t := range c.trees {
		c.domains[t.name] = &t.root
		c.names = append(c.names, t.name)
		walkLimits(t.nodes, func(l *Limit) {
			if prev := paths[l.Path]; prev != nil {
				errs = append(errs, &Error{File: l.File, Line: l.Line,
					Reason: fmt.Sprintf("limit path %s is also the path of the limit at %s; rename a key or value", Quote(l.Path), source(prev.File, prev.Line))})
				return
			}
			paths[l.Path] = l
			c.limits = append(c.limits, l)
		})
	}
	switch len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		if len(errs) > maxErrors { // bounded for logs, /readyz and NACKs
			errs = append(errs[:maxErrors], fmt.Errorf("and %d more errors", len(errs)-maxErrors))
		}
		return nil, errors.Join(errs...)
	}
	c.version = version(files)
	c.byPath = paths
	return c, nil
}

func walkLimits(nodes []*node, fn func(*Limit)) {
	for _, n := range nodes {
		if n.limit != nil {
			fn(n.limit)
		}
		walkLimits(n.ordered, fn)
	}
}

// version digests names and contents, each length-prefixed so that no two
// different inputs produce the same byte stream.
func version(files []sourceFile) string {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b sourceFile) int { return strings.Compare(a.hashName, b.hashName) })
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, f := range sorted {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f.hashName)))])
		io.WriteString(h, f.hashName)
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f.data)))])
		h.Write(f.data)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// decode reads a file's YAML documents. yaml.v3 is not known to panic on
// v3.0.1, but a config reload must never take the server down, so a panic in
// the parser is turned into an error here.
func decode(data []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			docs, err = nil, fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err == io.EOF {
			return docs, nil
		} else if err != nil {
			return nil, err
		}
		if len(doc.Content) > 0 {
			docs = append(docs, &doc)
		}
	}
}

// parseFile reads one file, charging its nodes to budget, what is left of
// the config's MaxNodes.
func parseFile(f sourceFile, budget *int) (*domainTree, error) {
	name := f.name
	var docs []*yaml.Node
	if f.tree != nil {
		docs = []*yaml.Node{{Kind: yaml.DocumentNode, Content: []*yaml.Node{f.tree()}}}
	} else {
		var err error
		if docs, err = decode(f.data); err != nil {
			return nil, yamlError(name, err)
		}
	}
	if len(docs) == 0 {
		return nil, &Error{File: name, Line: 1, Reason: "no domain: the file is empty"}
	}
	if len(docs) > 1 {
		// The reference's yaml.v2 would silently read only the first.
		return nil, &Error{File: name, Line: docs[1].Line, Reason: "a second YAML document: a file holds one domain"}
	}
	w := &walker{file: name, budget: budget}
	root := docs[0].Content[0]
	fs, err := w.fields(root, "the file", fileFields, 0)
	if err != nil {
		return nil, err
	}
	t := &domainTree{file: name, line: root.Line}
	if f, ok := fs["domain"]; ok {
		if t.name, err = w.label(f.val, "domain"); err != nil {
			return nil, err
		}
		t.line = f.key.Line
	}
	if t.name == "" {
		return nil, w.errorf(root, "no domain: the file must set a non-empty domain")
	}
	if f, ok := fs["descriptors"]; ok {
		items, err := w.seq(f.val, "descriptors")
		if err != nil {
			return nil, err
		}
		if t.nodes, err = w.descriptors(items, &t.root, t.name, t.name, nil); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// step is what a descriptor on a limit's path gives the limit: how the
// request's entry at its depth is counted (Limit.Shared) and named in
// metrics (Limit.Metric).
type step struct {
	shared   string
	metric   MetricEntry
	toMetric bool // value_to_metric
}

// descriptors reads one list of sibling descriptors into lv, returning them
// in file order. parent is the Path of the enclosing node, and trail what
// the descriptors on the way there give a limit (its length is the depth).
func (w *walker) descriptors(items []*yaml.Node, lv *level, domain, parent string, trail []step) ([]*node, error) {
	depth := len(trail) + 1
	seen := make(map[Entry]*node, len(items))
	nodes := make([]*node, 0, len(items))
	for _, item := range items {
		fs, err := w.fields(item, "descriptor", descriptorFields, 0)
		if err != nil {
			return nil, err
		}
		n := &node{line: item.Line}
		if f, ok := fs["key"]; ok {
			if n.key, err = w.label(f.val, "key"); err != nil {
				return nil, err
			}
		}
		if n.key == "" {
			return nil, w.errorf(item, "descriptor has no key")
		}
		if f, ok := fs["value"]; ok {
			if n.value, err = w.label(f.val, "value"); err != nil {
				return nil, err
			}
		}
		if prev := seen[Entry{n.key, n.value}]; prev != nil {
			what := fmt.Sprintf("key %s value %s", Quote(n.key), Quote(n.value))
			if n.value == "" {
				what = fmt.Sprintf("key %s without a value", Quote(n.key))
			}
			return nil, w.errorf(item, "duplicate descriptor %s at this level (first at line %d)", what, prev.line)
		}
		seen[Entry{n.key, n.value}] = n

		path := parent + "." + n.key
		if n.value != "" {
			path += "_" + n.value
		}
		var shadow, detailed, quota, shared bool
		var st step
		for _, b := range []struct {
			name string
			v    *bool
		}{{"shadow_mode", &shadow}, {"detailed_metric", &detailed}, {"quota_mode", &quota}, {"share_threshold", &shared}, {"value_to_metric", &st.toMetric}} {
			if f, ok := fs[b.name]; ok {
				if *b.v, err = w.boolean(f.val, b.name); err != nil {
					return nil, err
				}
			}
		}
		wildcard := strings.Contains(n.value, "*")
		if shared && !wildcard {
			return nil, w.errorf(fs["share_threshold"].key, "share_threshold applies to a wildcard value (containing '*'); %s has none", Quote(n.value))
		}
		// The reference's metric key: a shared wildcard as written, else
		// with value_to_metric the request's value where the descriptor
		// does not fix it, else the value as configured.
		st.metric.Value = n.value
		if shared {
			st.shared = n.value
		} else if st.toMetric && (wildcard || n.value == "") {
			st.metric = MetricEntry{Runtime: true}
		}
		// A stack: siblings overwrite this depth's step and nothing keeps
		// trail (fromTrail copies), so no copy per descriptor, which cost
		// depth² across a deep tree.
		trail := append(trail, st)
		var metadata map[string]any
		if f, ok := fs["metadata"]; ok && isSet(f.val) {
			v, err := w.value(f.val, 0)
			if err != nil {
				return nil, err
			}
			if metadata, ok = v.(map[string]any); !ok {
				return nil, w.errorf(f.val, "metadata must be a mapping")
			}
		}
		if f, ok := fs["rate_limit"]; ok && isSet(f.val) {
			rl, replaces, err := w.rateLimit(f)
			if err != nil {
				return nil, err
			}
			if rl.Holder && n.value != "" {
				return nil, w.errorf(f.key, "holder: true names the holder by the request's value of %s, so the descriptor must match its key only (it has value %s)", Quote(n.key), Quote(n.value))
			}
			n.limit = &Limit{Domain: domain, Path: path, RateLimit: rl, ShadowMode: shadow, QuotaMode: quota,
				DetailedMetric: detailed, Replaces: replaces, Metadata: metadata, File: w.file, Line: n.line}
			n.limit.Shared, n.limit.Metric = fromTrail(trail)
		}
		if f, ok := fs["descriptors"]; ok {
			children, err := w.seq(f.val, "descriptors")
			if err != nil {
				return nil, err
			}
			if len(children) > 0 && depth >= MaxDepth {
				return nil, w.errorf(f.key, "descriptors nested more than %d deep", MaxDepth)
			}
			if n.ordered, err = w.descriptors(children, &n.children, domain, path, trail); err != nil {
				return nil, err
			}
		}
		lv.add(n)
		nodes = append(nodes, n)
	}
	lv.sortWildcards()
	return nodes, nil
}

// isSet reports whether a field has a value other than null. It follows
// aliases without charging the budget; resolve charges them when read.
func isSet(n *yaml.Node) bool {
	for hops := 0; n.Kind == yaml.AliasNode && n.Alias != nil && hops <= MaxDepth; hops++ {
		n = n.Alias
	}
	return !isNull(n)
}

// fromTrail is what a limit at the end of trail keeps of it: Shared when
// an entry is shared, Metric when value_to_metric asks for runtime values.
func fromTrail(trail []step) (shared []string, metric []MetricEntry) {
	for i, st := range trail {
		if st.shared != "" {
			if shared == nil {
				shared = make([]string, len(trail))
			}
			shared[i] = st.shared
		}
		if st.toMetric && metric == nil {
			metric = make([]MetricEntry, len(trail))
			for j := range trail {
				metric[j] = trail[j].metric
			}
		}
	}
	return shared, metric
}
