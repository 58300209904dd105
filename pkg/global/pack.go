package global

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/pkg/algorithm"
)

// The decide script's arguments and reply are packed (lua/decide.lua):
// numbers travel as little-endian float64, exact for the integers they
// carry (µs times, limits, costs: all below 2⁵³), so neither side formats
// or parses text and Redis reads one argument per call, not six per item.
const (
	requestHeaderSize = 10 // now (float64; negative: the store's clock), items (uint16)
	requestItemSize   = 50 // kind, flags (uint8); limit, window, burst, cost, origin, age (float64)
	replyHeaderSize   = 8  // now (float64; -1: the request failed)
	replyItemSize     = 33 // allowed (uint8); remaining, retry, reset, left (float64)
)

// Item flags, as the script reads them. flagHolder says the item's
// holder (Params.Holder, a string, with no room in a fixed-size item)
// follows the packed requests as an argument of its own (appendHolders).
const (
	flagForce    = 1
	flagShadow   = 2
	flagCount    = 4
	flagGiveBack = 8
	flagHolder   = 16
	flagPacked   = 32 // store the item's state packed (RedisOptions.PackedState)
)

// appendRequest packs one request of items at now (µs; negative for the
// store's clock); packed asks the script to store their states packed.
func appendRequest(b []byte, items []Item, now int64, packed bool) []byte {
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(now)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(items))) // at most maxItems
	for i := range items {
		it := &items[i]
		var flags byte
		switch it.Mode {
		case algorithm.Force:
			flags |= flagForce
		case algorithm.Count:
			flags |= flagCount
		case algorithm.GiveBack:
			flags |= flagGiveBack
		}
		if it.Shadow {
			flags |= flagShadow
		}
		if carriesHolder(it) {
			flags |= flagHolder
		}
		if packed {
			flags |= flagPacked
		}
		b = append(b, byte(it.Params.Kind), flags)
		for _, v := range [...]int64{it.Params.Limit, it.Params.Window, it.Params.Burst, it.Cost, it.Params.Origin, it.Age} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
		}
	}
	return b
}

// appendHolders appends the holders of the items appendRequest flags
// with flagHolder, in item order: the script's arguments after the packed
// requests, as many as the flags it reads.
func appendHolders(dst []string, items []Item) []string {
	for i := range items {
		if carriesHolder(&items[i]) {
			dst = append(dst, items[i].Params.Holder)
		}
	}
	return dst
}

// carriesHolder says whether its holder goes to the script: only for the
// algorithm that reads one, so that the others' arguments stay as they
// were.
func carriesHolder(it *Item) bool { return it.Params.Kind == algorithm.Concurrency }

// replyValues are the values unpackReply reads per item.
const replyValues = 5

// replySize is the size of the reply to a request of n items.
func replySize(n int) int { return replyHeaderSize + n*replyItemSize }

// unpackReply reads the reply to a request of n items from the start of s
// into dst as now, then allowed (0 or 1), remaining, the bits of retry,
// reset and the bits of left (retry and left are float64s:
// math.Float64frombits) per item. A refund's retry is what it gave back
// (readDecide).
func unpackReply(dst []int64, s string, n int) ([]int64, error) {
	if len(s) < replySize(n) {
		return dst, fmt.Errorf("redis store: decide replied %d bytes for %d items", len(s), n)
	}
	dst = append(dst, int64(float64At(s, 0)))
	for i := range n {
		at := replyHeaderSize + i*replyItemSize
		dst = append(dst, int64(s[at]), int64(float64At(s, at+1)), int64(math.Float64bits(float64At(s, at+9))), int64(float64At(s, at+17)),
			int64(math.Float64bits(float64At(s, at+25))))
	}
	return dst, nil
}

func float64At(s string, at int) float64 {
	_ = s[at+7]
	u := uint64(s[at]) | uint64(s[at+1])<<8 | uint64(s[at+2])<<16 | uint64(s[at+3])<<24 |
		uint64(s[at+4])<<32 | uint64(s[at+5])<<40 | uint64(s[at+6])<<48 | uint64(s[at+7])<<56
	return math.Float64frombits(u)
}
