package redistest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// maxPrefixName caps the part of a prefix taken from the test name, so deep
// subtest names do not make every key long.
const maxPrefixName = 48

// Prefix returns a key prefix unique to this call, such as
// "TestLimit_burst-1f3a9c0e:", so tests can share a server without flushing
// it. It is the test name with everything but letters, digits, '_' and '-'
// replaced by '_' (so it never carries a '{' that would become a Cluster hash
// tag), cut to 48 bytes, then a random suffix.
func Prefix(t testing.TB) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > maxPrefixName {
		name = name[:maxPrefixName]
	}
	return fmt.Sprintf("%s-%08x:", name, rand.Uint32())
}
