package limiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/config"
)

// observe counts each decided limit and logs rejections, rate-limited.
func (s *Service) observe(d *decision) {
	b := &d.batch
	for j, l := range b.Limits {
		r := b.Results[j]
		result := "ok"
		switch {
		case !r.Allowed && l.ShadowMode:
			result = "shadow_over_limit"
		case !r.Allowed:
			result = "over_limit"
		}
		detailed := l.DetailedMetric || l.Metric != nil
		var values []string
		if detailed {
			values = metricValues(l, b.Request, b.Descriptors[j])
		}
		s.opts.Metrics.decision(b.Request.Domain(), l.PolicyName(), result, detailed, values)
		if s.opts.Metrics != nil && s.opts.Metrics.reference != nil {
			key := strings.TrimPrefix(l.Path, b.Request.Domain()+".")
			if detailed {
				key = strings.Join(values, ".")
			}
			it := b.Items[j]
			s.opts.Metrics.referenceDecision(b.Request.Domain(), key, it.Params, it.Cost, r, l.ShadowMode)
		}
		if result == "ok" {
			continue
		}
		if s.opts.TopKeys != nil {
			s.opts.TopKeys.Refused(l.PolicyName(), shownKey(b.Request, b.Descriptors[j]))
		}
		ok, dropped := s.logs.allow(s.opts.Now())
		if !ok {
			s.opts.Metrics.suppressed(1)
			continue
		}
		keys := make([]string, 0, b.Request.Entries(b.Descriptors[j]))
		for k := range b.Request.Entries(b.Descriptors[j]) {
			key, _ := b.Request.Entry(b.Descriptors[j], k)
			keys = append(keys, key)
		}
		msg := "over limit"
		if l.ShadowMode {
			msg = "over limit (shadow mode: not rejected)"
		}
		attrs := []slog.Attr{
			slog.String("domain", b.Request.Domain()),
			slog.String("descriptor", strings.Join(keys, ".")),
			slog.String("limit", l.PolicyName()),
			slog.Int64("retry_after_ms", r.RetryAfter/1000),
			slog.Bool("from_cache", d.cached),
		}
		if dropped > 0 {
			attrs = append(attrs, slog.Int("suppressed_since_last", dropped))
		}
		s.opts.Logger.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
	}
}

// metricValues are the entries of descriptor i as l's detailed metrics
// name them, as the reference's metric keys do: each key_value, a shared
// entry (share_threshold) by its wildcard; with value_to_metric, the
// request's value only where a descriptor does not fix it (a wildcard, a
// key alone).
func metricValues(l *config.Limit, req Request, i int) []string {
	n := req.Entries(i)
	values := make([]string, 0, n)
	for k := range n {
		key, value := req.Entry(i, k)
		key, value = EntryValue(key), EntryValue(value)
		switch {
		case k < len(l.Shared) && l.Shared[k] != "":
			value = l.Shared[k]
		case !l.DetailedMetric && k < len(l.Metric) && !l.Metric[k].Runtime:
			value = l.Metric[k].Value
		}
		if value == "" {
			values = append(values, key)
			continue
		}
		values = append(values, key+"_"+value)
	}
	return values
}

// shownKey is a descriptor as operators see it: key=value pairs, a value
// shown as sent when short and printable, else by digest.
func shownKey(req Request, i int) string {
	var b strings.Builder
	for k := range req.Entries(i) {
		key, value := req.Entry(i, k)
		if k > 0 {
			b.WriteByte(';')
		}
		b.WriteString(shown(key))
		b.WriteByte('=')
		b.WriteString(shown(value))
	}
	return b.String()
}

// maxShown is the longest value shown as sent.
const maxShown = 64

func shown(v string) string {
	ok := len(v) <= maxShown
	for _, r := range v {
		if !ok || r < 0x20 || r == 0x7f || r == utf8.RuneError || r == ';' || r == '=' {
			ok = false
			break
		}
	}
	if ok {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:8])
}
