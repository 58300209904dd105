package limiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/config"
)

// observe counts each decided limit and logs rejections, rate-limited.
func (s *Service) observe(d *decision) {
	b := &d.batch
	for j, l := range b.Limits {
		r := b.Results[j]
		if b.Items[j].Mode == algorithm.GiveBack {
			if d.storeRefunds {
				s.opts.Metrics.refund(b.Request.Domain(), l.PolicyName(), r.Given, float64(b.Items[j].Cost))
			}
			continue // a refund is no decision: never refused, never over limit
		}
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

// shownKey is a descriptor as operators see it: key=value pairs, each
// key and value as shown says.
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

// MaxShownBytes is the longest value shown as sent (escaped: see shown).
const MaxShownBytes = 128

// digestPrefix leads a value shown by digest.
const digestPrefix = "sha256:"

// shown is a descriptor key or value as operators are shown it, on the
// admin page, /debug/top and anywhere else: the one place that decides.
//
// A value is shown as sent, except that each character a reader would
// not see as itself is escaped visibly: format characters (U+200B-U+200F,
// U+202A-U+202E, U+2066-U+2069, U+FEFF...), line and paragraph
// separators, spaces other than ASCII's, private-use and unassigned code
// points, characters ignored when drawn (Hangul fillers, variation
// selectors, tags...) and U+2800, as \u202e (or \U000e0041 beyond U+FFFF);
// an ASCII space too where it would not be seen (first, last or after
// another); and a backslash is doubled, so that no text sent reads as an
// escape. Distinct values are shown distinctly (up to collisions of 64
// bits of SHA-256 between digests).
//
// A value is shown by digest ("sha256:" and 16 hex digits of its SHA-256)
// instead when that form would exceed MaxShownBytes, when it is not
// UTF-8 or holds a control character, ';' or '=' (which no header value
// carries in earnest, and which would make key=value;... ambiguous), or
// when it begins with "sha256:" itself, so that no value can be sent to
// read as another's digest.
func shown(v string) string {
	if len(v) > MaxShownBytes || strings.HasPrefix(v, digestPrefix) || !utf8.ValidString(v) {
		return digest(v)
	}
	var b []byte // nil while v is shown as it is
	for i, r := range v {
		plain := true
		switch {
		case r < 0x20 || 0x7f <= r && r < 0xa0 || r == ';' || r == '=':
			return digest(v)
		case r == '\\' || r == ' ' && (i == 0 || i == len(v)-1 || v[i-1] == ' ') || invisible(r):
			plain = false
		}
		if plain && b == nil {
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, 2*len(v)), v[:i]...)
		}
		switch {
		case plain:
			b = utf8.AppendRune(b, r)
		case r == '\\':
			b = append(b, '\\', '\\')
		case r <= 0xffff:
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = fmt.Appendf(b, `\U%08x`, r)
		}
		if len(b) > MaxShownBytes {
			return digest(v)
		}
	}
	if b == nil {
		return v
	}
	return string(b)
}

// invisible says whether r, in a shown value, would not be seen as
// itself: anything Go does not call printable (which ASCII's space alone
// of the spaces is), and the printable characters drawn as nothing.
func invisible(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7f
	}
	return !unicode.IsPrint(r) || r == '\u2800' ||
		unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

func digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return digestPrefix + hex.EncodeToString(sum[:8])
}
