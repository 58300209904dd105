package global

import "github.com/sluicehq/sluice/pkg/algorithm"

// records reports whether every item records hits (algorithm.Force): a
// sidecar's flush or cached mode's tier, whose answers are on no client's
// path, so that its call may wait for others to share a script call
// (RedisOptions.RecordLinger).
func records(items []Item) bool {
	for i := range items {
		if items[i].Mode != algorithm.Force {
			return false
		}
	}
	return true
}
