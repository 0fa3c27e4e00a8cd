package tensor

import (
	"encoding/binary"
	"math"
)

// GGML's other 32-element "legacy" types, besides Q8_0 and Q4_0. Each block
// is 32 elements; the quant of element j (j < 16) sits in the low nibble of
// qs[j] and that of element j+16 in its high nibble, as for Q4_0.
//
// Q4_1, 20 bytes (block_q4_1):
//
//	[0:2]  d  float16
//	[2:4]  m  float16
//	[4:20] qs: 32 4-bit quants
//
// w = q·d + m, q in 0..15.
//
// Q5_0, 22 bytes (block_q5_0):
//
//	[0:2]  d  float16
//	[2:6]  qh: the 32 fifth bits, a little-endian uint32; element j's is bit j
//	[6:22] qs: the low four bits
//
// w = (q−16)·d, q in 0..31.
//
// Q5_1, 24 bytes (block_q5_1): d and m float16, then qh and qs as in Q5_0
// (at [4:8] and [8:24]); w = q·d + m, q in 0..31.
//
// llama.cpp's K-quant mixes write Q5_0 (for Q4_K) and Q5_1 (for Q5_K) where a
// matrix's rows are not a multiple of 256, so published Q4_K_M and Q5_K_M
// files hold them.

// Block sizes in bytes of the legacy 32-element types.
const (
	Q4_1Bytes = 20
	Q5_0Bytes = 22
	Q5_1Bytes = 24
)

// LegacyQuant returns the quant (0..15 or 0..31) of element j (0..31) of a
// Q4_1, Q5_0 or Q5_1 block blk: the value before the offset (−16 for Q5_0)
// or the scale and min are applied. It panics for other types.
func LegacyQuant(t DType, blk []byte, j int) int {
	var qs []byte
	var qh uint32
	switch t {
	case Q4_1:
		qs = blk[4:20]
	case Q5_0:
		qh, qs = binary.LittleEndian.Uint32(blk[2:]), blk[6:22]
	case Q5_1:
		qh, qs = binary.LittleEndian.Uint32(blk[4:]), blk[8:24]
	default:
		panic("tensor: LegacyQuant of " + t.String())
	}
	q := int(qs[j%16] & 0x0f)
	if j >= 16 {
		q = int(qs[j%16] >> 4)
	}
	if t != Q4_1 {
		q |= int(qh>>uint(j)&1) << 4
	}
	return q
}

// dequantLegacyBlock decodes one Q4_1, Q5_0 or Q5_1 block into dst[:32].
// The product is rounded before m is added (an explicit conversion, so no
// platform fuses the two), as ggml's reference decoder writes it.
func dequantLegacyBlock(t DType, dst []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	if t == Q5_0 {
		for j := range 32 {
			dst[j] = float32(LegacyQuant(t, blk, j)-16) * d
		}
		return
	}
	m := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
	for j := range 32 {
		dst[j] = float32(float32(LegacyQuant(t, blk, j))*d) + m
	}
}

// quantizeQ5_0Block is GGML's reference Q5_0 quantiser: the scale puts the
// element of largest magnitude at level −16 (so its sign sets d's), and
// every element rounds to the nearest of the 32 levels, clamped at 31.
func quantizeQ5_0Block(dst []byte, x []float32) {
	x = x[:32]
	id := signedMaxScale(dst, x, 16)
	var q [32]int
	for j, v := range x {
		q[j] = truncClamp(float32(v*id)+16.5, 31)
	}
	packLegacy(dst[2:6], dst[6:22], &q)
}

// quantizeMinBlock is GGML's reference Q4_1 (qmax 15) and Q5_1 (qmax 31)
// quantiser: the block's minimum is the offset m and d spreads the range to
// the maximum over qmax steps; every element rounds to the nearest level.
// The quants are taken against the float32 minimum, not its float16
// rounding, as llama.cpp does.
func quantizeMinBlock(dst []byte, x []float32, qmax int) {
	x = x[:32]
	// Compared as GGML's reference does, keeping the first of equals:
	// Go's min orders −0 below +0, which would store m as −0 (0x8000)
	// where llama.cpp stores +0 when a +0 comes first.
	mn, mx := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	d := (mx - mn) / float32(qmax)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	binary.LittleEndian.PutUint16(dst[2:], F32ToF16(mn))
	var q [32]int
	for j, v := range x {
		q[j] = truncClamp(float32(float32(v-mn)*id)+0.5, qmax)
	}
	if qmax == 15 {
		packLegacy(nil, dst[4:20], &q)
		return
	}
	packLegacy(dst[4:8], dst[8:24], &q)
}

// packLegacy writes 32 quants as nibbles into qs (element j low, j+16 high)
// and, unless qh is nil, their fifth bits into qh.
func packLegacy(qh, qs []byte, q *[32]int) {
	var h uint32
	for j := range 16 {
		qs[j] = byte(q[j]&0x0f) | byte(q[j+16]&0x0f)<<4
		h |= uint32(q[j]>>4&1)<<uint(j) | uint32(q[j+16]>>4&1)<<uint(j+16)
	}
	if qh != nil {
		binary.LittleEndian.PutUint32(qh, h)
	}
}

// truncClamp truncates v toward zero into [0, hi], the C (int8/uint8)
// conversion llama.cpp's reference quantisers use on v ≥ 0. NaN goes to 0.
func truncClamp(v float32, hi int) int {
	if !(v >= 0) {
		return 0
	}
	if v >= float32(hi) {
		return hi
	}
	return int(v)
}
