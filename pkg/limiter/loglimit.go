package limiter

import (
	"sync"
	"time"
)

// logLimiter lets through at most n log lines per period, so a flood of
// rejections cannot flood the log; it counts what it drops so the next
// line that passes can say so.
type logLimiter struct {
	mu         sync.Mutex
	n          int
	period     time.Duration
	start      time.Time
	used       int
	suppressed int
}

func newLogLimiter(n int, period time.Duration) *logLimiter {
	return &logLimiter{n: n, period: period}
}

// allow reports whether a line may be logged at now, and how many lines
// were dropped since the last one that was.
func (l *logLimiter) allow(now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= l.period {
		l.start, l.used = now, 0
	}
	if l.used >= l.n {
		l.suppressed++
		return false, 0
	}
	l.used++
	dropped, l.suppressed = l.suppressed, 0
	return true, dropped
}
