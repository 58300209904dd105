package redistest

import (
	"testing"
)

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := StartSentinel(t)
	fc := s.FailoverClient(t)
	key := Prefix(t) + "k"

	if err := fc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("Set through sentinel: %v", err)
	}
	// The write went to the master the sentinel names.
	if got, err := s.Master.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("Get on master = %q, %v; want \"v\"", got, err)
	}

	// A crashed and restarted master is found again through the sentinel.
	s.Master.Kill()
	s.Master.Restart(t)
	if err := fc.Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Fatalf("Set through sentinel after master restart: %v", err)
	}
}
