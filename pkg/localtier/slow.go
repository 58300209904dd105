package localtier

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// slowWindow is how recently the upstream must have answered some call for
// a call that timed out to count as the upstream being slow rather than
// gone. A call's timeout is tens of milliseconds; on a machine a flood
// saturates, a healthy upstream can leave every call unanswered for a few
// hundred (its process, or this one, waiting for a core), and taking that
// for an outage turns the sidecar into an independent limiter exactly when
// the flood comes. An upstream that answered nothing for a second is
// frozen or cut off. Misjudged the other way, a frozen upstream costs
// each request its call's timeout for a second, answered within the
// allowance meanwhile.
const slowWindow = time.Second

// answering reports whether err, a failed upstream call's, is a timeout of
// an upstream that answers other calls: slow (this machine or the
// upstream's busy), not gone. Such calls do not count against the
// upstream's breaker.
func (t *Tier) answering(err error) bool {
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return t.opts.Now().Sub(t.base).Nanoseconds()-t.lastAnswer.Load() <= int64(slowWindow)
}

// slow decides b, which passed the local buckets (set), without the
// upstream's answer to its sync call c (nil: the call failed), which came
// too late: on a key the upstream found tight, within this sidecar's
// allowance (its share of what the limit had left, pkg/share), elsewhere
// as the local bucket did. The hits admitted are recorded, in the window
// they were admitted in, unless c's answer, when it comes, says the
// upstream counted them (await).
func (t *Tier) slow(b *limiter.Batch, share float64, now time.Time, set took, c *syncCall) {
	b.Degraded, b.Source = true, limiter.SourceSlow
	var short took
	if !t.allow.take(b, now.Sub(t.base).Nanoseconds(), &short) {
		if c != nil {
			c.stop()
		}
		t.returnLocal(b, share, now, set)
		t.refuse(b, short)
		t.record(b, now, false)
		return
	}
	if c != nil && t.await(c, t.snapshot(b, now)) {
		t.record(b, now, false) // the demand now, the hits when the answer says
		return
	}
	if c != nil {
		c.stop()
	}
	t.record(b, now, true)
}
