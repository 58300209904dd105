package limiter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// tagLen is the hex length of a key's hash tag: 128 bits of SHA-256.
const tagLen = 32

// A key names one limit instance by parts (domain, limit path, algorithm,
// the request's descriptor entries), each length-prefixed before hashing,
// so no choice of values can make two different instances share a key. The
// key is prefix + "{" + 32 hex digits + "}": fixed length whatever the
// values' sizes, and the braces are ours, so a value containing "{" cannot
// move the Cluster hash tag (Redis hashes the first "{...}" only). Each
// instance has its own slot.
//
// KeyName builds a key part by part without allocating (the request
// path's way); Key takes the parts at once. Both give the same key for the
// same parts.

// KeyName is the name of a limit instance, built part by part. Its
// encoding is this package's: callers add parts and make the key, nothing
// else, so no two different lists of parts can name the same key.
//
// A KeyName belongs to the goroutine building it and is not safe for
// concurrent use; the zero value is an empty name, ready to use.
type KeyName struct{ b []byte }

// NewKeyName starts an empty name in buf's space (buf[:0]): a stack array
// the name fits in keeps Add and AppendKey from allocating.
func NewKeyName(buf []byte) KeyName { return KeyName{buf[:0]} }

// Add returns n with part appended.
func (n KeyName) Add(part string) KeyName {
	n.b = binary.AppendUvarint(n.b, uint64(len(part)))
	n.b = append(n.b, part...)
	return n
}

// AppendKey appends to dst the store key the name stands for.
func (n KeyName) AppendKey(dst []byte, prefix string) []byte {
	sum := sha256.Sum256(n.b)
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = hex.AppendEncode(dst, sum[:tagLen/2])
	return append(dst, '}')
}

// Key returns the store key named by parts.
func Key(prefix string, parts ...string) string {
	var buf [256]byte
	name := NewKeyName(buf[:])
	for _, p := range parts {
		name = name.Add(p)
	}
	return string(name.AppendKey(nil, prefix))
}
