package global

import "strings"

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
