package localbucket_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/localbucket"
)

// One bucket per client: one request per second on average, bursts of two.
// Production code calls Allow, which reads the clock; AllowN takes the time,
// so this example (like a test) steps through fixed instants.
func Example() {
	buckets, err := localbucket.New(localbucket.Options{MaxKeys: 100_000})
	if err != nil {
		panic(err)
	}
	perClient := localbucket.Limit{Rate: 1, Burst: 2}

	now := time.Now()
	for range 3 {
		d := buckets.AllowN("client-42", perClient, now, 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	d := buckets.AllowN("client-7", perClient, now, 1) // another key, another bucket
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	d = buckets.AllowN("client-42", perClient, now.Add(time.Second), 1)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1s
	// true 1 0s
	// true 0 0s
}
