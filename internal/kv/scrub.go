package kv

import (
	"fmt"
	"math"
)

// ScrubMode says how a page is cleaned when it goes back to the free list.
type ScrubMode uint8

const (
	// ScrubPoison (the zero value, so the default) fills a freed page with
	// quiet NaNs whose payload spells the previous owner's request id. A
	// stale read then turns attention into NaN instead of plausible text,
	// and PoisonRequest says whose page it was.
	ScrubPoison ScrubMode = iota
	// ScrubZero fills a freed page with zeros.
	ScrubZero
	// ScrubOff leaves freed pages as they are. It exists only to measure
	// what scrubbing costs; never run a server with it.
	ScrubOff
)

func (m ScrubMode) String() string {
	switch m {
	case ScrubPoison:
		return "poison"
	case ScrubZero:
		return "zero"
	case ScrubOff:
		return "off"
	}
	return fmt.Sprintf("ScrubMode(%d)", uint8(m))
}

// The poison word for index i is a quiet NaN (exponent all ones, bit 22
// set) whose low 22 bits hold a 2-bit chunk index and 20 bits of the
// request id. Four consecutive words therefore carry all 64 bits, and any
// four consecutive words of a poisoned page decode on their own. In an f16
// pool (two binary16 elements per word) the upper half of every word,
// 0x7FCx, is a binary16 NaN too, so a stale read poisons attention there
// as well.
const (
	poisonBase  = 0x7FC00000
	poisonChunk = 20
	poisonMask  = 1<<poisonChunk - 1
)

func poisonWord(request uint64, i int) uint32 {
	c := uint(i & 3)
	return poisonBase | uint32(c)<<poisonChunk | uint32(request>>(poisonChunk*c))&poisonMask
}

// poisonPattern returns the four words that repeat through a page poisoned
// for request.
func poisonPattern(request uint64) [4]float32 {
	var p [4]float32
	for i := range p {
		p[i] = math.Float32frombits(poisonWord(request, i))
	}
	return p
}

// fillPoison writes the pattern over dst, starting with chunk 0 at dst[0].
func fillPoison(dst []float32, request uint64) {
	if len(dst) == 0 {
		return
	}
	pat := poisonPattern(request)
	n := copy(dst, pat[:])
	for n < len(dst) {
		n += copy(dst[n:], dst[:n])
	}
}

// isPoison reports whether every word of vals is the poison for request,
// with vals[0] at chunk 0.
func isPoison(vals []float32, request uint64) bool {
	for i, v := range vals {
		if math.Float32bits(v) != poisonWord(request, i) {
			return false
		}
	}
	return true
}

// PoisonRequest decodes the request id from a stale read of a poisoned
// page: vals must hold at least four consecutive words of the poison
// pattern, starting anywhere. It returns false when vals is not poison,
// which is how a test or a kernel can tell scrubbed data from real data.
func PoisonRequest(vals []float32) (request uint64, ok bool) {
	if len(vals) < 4 {
		return 0, false
	}
	var seen uint8
	for _, v := range vals[:4] {
		b := math.Float32bits(v)
		if b&^(3<<poisonChunk|poisonMask) != poisonBase {
			return 0, false
		}
		c := uint(b>>poisonChunk) & 3
		seen |= 1 << c
		request |= uint64(b&poisonMask) << (poisonChunk * c)
	}
	return request, seen == 0xF
}
