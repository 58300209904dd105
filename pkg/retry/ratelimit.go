package retry

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// rateLimitReset reads the RateLimit field of
// draft-ietf-httpapi-ratelimit-headers (-09 on; sluice's own server sends
// it): a Structured Fields List (RFC 9651) of policies, each named by a
// String with r, the quota remaining, and t, the seconds until it is
// restored, as in
//
//	RateLimit: "per-client";r=0;t=5, "daily";r=900;t=50000
//
// It returns the longest t among exhausted policies (r=0): a request
// passes only once every policy that refused it has quota again, and
// policies with quota left are not what refused it. ok is false when no
// policy is exhausted with a valid t, or when the field does not parse,
// in which case RFC 9651 has it ignored whole. The earlier drafts'
// Dictionary form (limit=10, remaining=0, reset=5) and the unstandardised
// X-RateLimit-Reset (seconds or a Unix time, depending on the server) are
// not read.
func rateLimitReset(h http.Header) (d time.Duration, ok bool) {
	lines := h.Values("RateLimit")
	if len(lines) == 0 {
		return 0, false
	}
	// Field lines combine as one list (RFC 9110 §5.3).
	p := sfParser{s: strings.Trim(strings.Join(lines, ","), " ")}
	if p.s == "" {
		return 0, false
	}
	for {
		if _, _, valid := p.bareItem(); !valid {
			return 0, false
		}
		r, t, valid := p.params()
		if !valid {
			return 0, false
		}
		if r == 0 && t >= 0 {
			d, ok = max(d, seconds(t)), true
		}
		p.skipOWS()
		if p.done() {
			return d, ok
		}
		if !p.consume(',') {
			return 0, false
		}
		p.skipOWS()
		if p.done() { // a trailing comma
			return 0, false
		}
	}
}

// seconds converts a count of seconds that parsed as an sf-integer, and
// so has at most 15 digits, saturating where a Duration would overflow.
func seconds(n int64) time.Duration {
	if n > maxSeconds {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}

// sfParser reads the parts of RFC 9651 that a List of Items needs. It
// checks the syntax of every bare item type but keeps only integers.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) consume(c byte) bool {
	if p.done() || p.s[p.i] != c {
		return false
	}
	p.i++
	return true
}

func (p *sfParser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// params reads an item's parameters and returns its r and t, each -1
// unless the last of its name is a non-negative Integer.
func (p *sfParser) params() (r, t int64, ok bool) {
	r, t = -1, -1
	for p.consume(';') {
		for p.consume(' ') {
		}
		key, ok := p.key()
		if !ok {
			return 0, 0, false
		}
		n, isInt := int64(-1), false // a bare key is Boolean true
		if p.consume('=') {
			if n, isInt, ok = p.bareItem(); !ok {
				return 0, 0, false
			}
		}
		if !isInt || n < 0 {
			n = -1
		}
		switch key {
		case "r":
			r = n
		case "t":
			t = n
		}
	}
	return r, t, true
}

// key reads a parameter key: ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" /
// "-" / "." / "*" ).
func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for p.i++; !p.done(); p.i++ {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
	}
	return p.s[start:p.i], true
}

// bareItem reads any bare item but a Display String, reporting its value
// when it is an Integer. Inner lists are not bare items and fail here.
func (p *sfParser) bareItem() (n int64, isInt, ok bool) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '@': // Date: an Integer of seconds
		p.i++
		_, isInt, ok = p.number()
		return 0, false, ok && isInt
	case c == '"':
		return 0, false, p.str()
	case c == ':':
		return 0, false, p.byteSeq()
	case c == '?':
		p.i++
		return 0, false, p.consume('0') || p.consume('1')
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for p.i++; !p.done() && isTokenChar(p.s[p.i]); p.i++ {
		}
		return 0, false, true
	}
	return 0, false, false
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a point, 1 to 3 digits).
func (p *sfParser) number() (n int64, isInt, ok bool) {
	start := p.i
	p.consume('-')
	digits := p.i
	for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	whole := p.i - digits
	if whole == 0 {
		return 0, false, false
	}
	if !p.consume('.') {
		if whole > 15 {
			return 0, false, false
		}
		n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		return n, true, err == nil
	}
	frac := p.i
	for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	return 0, false, whole <= 12 && p.i-frac >= 1 && p.i-frac <= 3
}

// str reads a String: printable ASCII in quotes, with \" and \\ escapes.
func (p *sfParser) str() bool {
	p.i++ // the opening quote
	for !p.done() {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return true
		case c == '\\':
			p.i++
			if c := p.peek(); c != '"' && c != '\\' {
				return false
			}
		case c < 0x20 || c > 0x7e:
			return false
		}
		p.i++
	}
	return false
}

// byteSeq reads a Byte Sequence: base64 between colons.
func (p *sfParser) byteSeq() bool {
	p.i++ // the opening colon
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == ':':
			return true
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return false
}

// isTokenChar reports whether c may follow a Token's first character:
// tchar (RFC 9110), ":" or "/".
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
