package httplimit

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/global"
)

// memoryLeases are leases on a memory store of the test's own.
func memoryLeases(t *testing.T) *global.Leases {
	t.Helper()
	m, err := global.NewMemory(global.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return global.NewLeases(m)
}

// redisLeases are leases on a Redis store, on a redis-server of the test's
// own.
func redisLeases(t *testing.T) *global.Leases {
	t.Helper()
	rs, err := global.NewRedis(global.RedisOptions{Client: redistest.Start(t).Client(t), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return global.NewLeases(rs)
}
