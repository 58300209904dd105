package retry

import (
	"context"
	"time"
)

// Clock is where a Transport reads the time and waits between attempts.
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. Elapsed time is measured between its
	// readings, so the system clock's include the monotonic reading.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, in which case it returns
	// ctx.Err() without waiting out d.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the real clock: time.Now (with its monotonic
// reading, so elapsed-time budgets ignore wall-clock steps) and a timer
// that ctx can cut short. It is the default wherever a Clock is optional.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
