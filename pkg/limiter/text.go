package limiter

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
)

// limitText is what replies say of one limit that never changes with the
// request: built once per configured limit and config snapshot rather than
// on every reply.
type limitText struct {
	// name is the policy name as a Structured Field string.
	name string
	// policy is the limit's RateLimit-Policy list member: name;q=..;w=..
	policy string
	// reason is the X-RateLimit-Reason of a 429 it alone refused.
	reason string
	// bodyHead and bodyTail are the problem-details body of such a 429
	// around its retry seconds; empty when the name defeats the split.
	bodyHead, bodyTail string
}

func newLimitText(l *config.Limit) *limitText {
	name := sfString(l.PolicyName())
	var b []byte
	b = append(b, name...)
	b = append(b, ";q="...)
	b = strconv.AppendUint(b, uint64(l.RateLimit.RequestsPerUnit), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, int64(l.RateLimit.Window()/time.Second), 10)
	t := &limitText{name: name, policy: string(b), reason: headerSafe(l.PolicyName())}
	const marker = "\x01retry\x01" // JSON escapes it: it cannot come from the name
	body := string(problemBody([]string{l.PolicyName()}, overLimitDetail(l.PolicyName(), marker)))
	if head, tail, ok := strings.Cut(body, `\u0001retry\u0001`); ok && !strings.Contains(tail, `\u0001retry\u0001`) {
		t.bodyHead, t.bodyTail = head, tail
	}
	return t
}

// body returns the problem-details body of a 429 that this limit alone
// refused, with a retry in retry seconds.
func (t *limitText) body(retry int64) []byte {
	b := make([]byte, 0, len(t.bodyHead)+len(t.bodyTail)+20)
	b = append(b, t.bodyHead...)
	b = strconv.AppendInt(b, retry, 10)
	return append(b, t.bodyTail...)
}

// text returns l's text: once per config snapshot for a configured limit,
// afresh for one a request overrode (which no later request shares).
func (s *Service) text(cfg *config.Config, l *config.Limit, overridden bool) *limitText {
	if overridden {
		return newLimitText(l)
	}
	return s.texts.Get(cfg, l, newLimitText)
}
