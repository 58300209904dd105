package limiter

import (
	"context"
	"log/slog"
	"strings"
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
		var values []string
		if l.DetailedMetric {
			for k := range b.Request.Entries(b.Descriptors[j]) {
				key, value := b.Request.Entry(b.Descriptors[j], k)
				values = append(values, EntryValue(key)+"_"+EntryValue(value))
			}
		}
		s.opts.Metrics.decision(b.Request.Domain(), l.PolicyName(), result, l.DetailedMetric, values)
		if result == "ok" {
			continue
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
