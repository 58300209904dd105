package config

import (
	"encoding/json"
	"strconv"
)

// The JSON form of a Config, for the admin /config endpoint. Field names are
// snake_case like the YAML; limits appear resolved (defaults applied) with
// their window in seconds, and every node says where it was written.
type (
	jsonConfig struct {
		Version string       `json:"version"`
		Domains []jsonDomain `json:"domains"`
	}
	jsonDomain struct {
		Domain      string           `json:"domain"`
		Source      string           `json:"source"`
		Descriptors []jsonDescriptor `json:"descriptors"`
	}
	jsonDescriptor struct {
		Key         string           `json:"key"`
		Value       string           `json:"value,omitempty"`
		Source      string           `json:"source"`
		RateLimit   *jsonLimit       `json:"rate_limit,omitempty"`
		ShadowMode  bool             `json:"shadow_mode,omitempty"`
		QuotaMode   bool             `json:"quota_mode,omitempty"`
		Detailed    bool             `json:"detailed_metric,omitempty"`
		Metadata    map[string]any   `json:"metadata,omitempty"`
		Descriptors []jsonDescriptor `json:"descriptors,omitempty"`
	}
	jsonLimit struct {
		Path            string   `json:"path"`
		Policy          string   `json:"policy"`
		Name            string   `json:"name,omitempty"`
		Unlimited       bool     `json:"unlimited,omitempty"`
		Algorithm       string   `json:"algorithm,omitempty"`
		Unit            string   `json:"unit,omitempty"`
		UnitMultiplier  uint32   `json:"unit_multiplier,omitempty"`
		RequestsPerUnit uint32   `json:"requests_per_unit,omitempty"`
		WindowSeconds   int64    `json:"window_seconds,omitempty"`
		Burst           uint32   `json:"burst,omitempty"`
		CountRefused    bool     `json:"count_refused,omitempty"`
		Holder          bool     `json:"holder,omitempty"`
		Calendar        string   `json:"calendar,omitempty"`
		Replaces        []string `json:"replaces,omitempty"`
		// Shared: per entry, the wildcard its matches share (share_threshold).
		Shared []string `json:"shared_values,omitempty"`
	}
)

// MarshalJSON describes the loaded config: its version, and per domain (in
// Domains order) the descriptor tree in file order with each resolved limit
// (algorithm, window in seconds, burst) and its source as "file:line".
func (c *Config) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	out := jsonConfig{Version: c.version, Domains: make([]jsonDomain, 0, len(c.trees))}
	for _, t := range c.trees {
		out.Domains = append(out.Domains, jsonDomain{
			Domain:      t.name,
			Source:      source(t.file, t.line),
			Descriptors: jsonNodes(t.file, t.nodes),
		})
	}
	return json.Marshal(out)
}

func jsonNodes(file string, nodes []*node) []jsonDescriptor {
	out := make([]jsonDescriptor, 0, len(nodes))
	for _, n := range nodes {
		d := jsonDescriptor{Key: n.key, Value: n.value, Source: source(file, n.line)}
		if l := n.limit; l != nil {
			d.ShadowMode, d.QuotaMode, d.Detailed, d.Metadata = l.ShadowMode, l.QuotaMode, l.DetailedMetric, l.Metadata
			r := l.RateLimit
			jl := &jsonLimit{Path: l.Path, Policy: l.PolicyName(), Name: r.Name, Unlimited: r.Unlimited, Replaces: l.Replaces, Shared: l.Shared}
			if !r.Unlimited {
				jl.Algorithm = r.Algorithm.String()
				jl.Unit = r.Unit.String()
				jl.UnitMultiplier = r.UnitMultiplier
				jl.RequestsPerUnit = r.RequestsPerUnit
				jl.WindowSeconds = int64(r.Window().Seconds())
				jl.CountRefused, jl.Holder = r.CountRefused, r.Holder
				if r.Calendar != nil {
					jl.Calendar = r.Calendar.String()
				}
				if r.HasBurst() {
					jl.Burst = r.Burst // the other algorithms have no burst
				}
			}
			d.RateLimit = jl
		}
		if len(n.ordered) > 0 {
			d.Descriptors = jsonNodes(file, n.ordered)
		}
		out = append(out, d)
	}
	return out
}

// source is where a node was written: file:line, or the file alone for
// a document without lines (an xDS resource).
func source(file string, line int) string {
	if line <= 0 {
		return file
	}
	return file + ":" + strconv.Itoa(line)
}
