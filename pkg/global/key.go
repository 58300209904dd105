package global

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// tagLen is the hex length of a key's hash tag: 128 bits of SHA-256.
const tagLen = 32

// AppendKey appends the store key of one limit instance to dst. parts
// name it (domain, limit path, algorithm, the request's descriptor values);
// they are length-prefixed before hashing, so no choice of values can make
// two different instances share a key. The key is prefix + "{" + 32 hex
// digits + "}": fixed length whatever the values' sizes, and the braces are
// ours, so a value containing "{" cannot move the Cluster hash tag (Redis
// hashes the first "{...}" only). Each instance has its own slot.
func AppendKey(dst []byte, prefix string, parts ...string) []byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, p := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = hex.AppendEncode(dst, sum[:tagLen/2])
	return append(dst, '}')
}

// Key is AppendKey into a new string.
func Key(prefix string, parts ...string) string {
	return string(AppendKey(nil, prefix, parts...))
}

// slot is the Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash
// tag, modulo 16384.
func slot(key string) uint16 {
	s := key
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if j := strings.IndexByte(s[i+1:], '}'); j > 0 {
			s = s[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
