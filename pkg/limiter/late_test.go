package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/algorithm"
	"github.com/sluicehq/sluice/pkg/global"
)

// lateStore answers after its caller's deadline: a healthy store this
// process cannot wait for.
type lateStore struct{}

func (lateStore) Decide(ctx context.Context, _ []algorithm.Item, _ []algorithm.Result) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestExactBatchIsNotShed: a batch whose caller decides locally itself
// when the store is late (a sidecar) gets ErrLate, not an answer from this
// process's memory that the store would never count; a client's batch is
// shed as before.
func TestExactBatchIsNotShed(t *testing.T) {
	fallback, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewStoreDecider(StoreOptions{Store: lateStore{}, Fallback: fallback, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := algorithm.Params{Kind: algorithm.TokenBucket, Limit: 10, Window: 1e6, Burst: 10}
	for _, exact := range []bool{false, true} {
		b := &Batch{Items: []algorithm.Item{{Key: "k", Params: p, Cost: 1}}, Results: make([]algorithm.Result, 1), Exact: exact}
		err := d.Decide(context.Background(), b)
		switch {
		case exact && !errors.Is(err, ErrLate):
			t.Errorf("an exact batch the store did not answer in time: %v, tier %q; want ErrLate", err, b.Source)
		case !exact && (err != nil || b.Source != SourceShed):
			t.Errorf("a client's batch the store did not answer in time: %v, tier %q; want shed", err, b.Source)
		}
	}
	if !d.Healthy() {
		t.Error("a late store opened the breaker")
	}
}
