package tensor

import (
	"encoding/binary"
)

// Q5_K, 176 bytes (block_q5_K):
//
//	[0:2]     d     float16, scale of the 6-bit sub-block scales
//	[2:4]     dmin  float16, scale of the 6-bit sub-block mins
//	[4:16]    scales: eight 6-bit scales and mins, packed as Q4_K's
//	          (UnpackQ4KScales)
//	[16:48]   qh: the fifth (high) bit of every quant
//	[48:176]  qs: the low four bits, in Q4_K's nibble order
//
// Element e = 64c+l (chunk c = 0..3, l = 0..31) takes the low nibble of
// qs[32c+l] and, as its bit 4, bit 2c of qh[l]; element 64c+32+l takes the
// high nibble of qs[32c+l] and bit 2c+1 of qh[l]. So qh[l] holds the high
// bits of the eight elements l, l+32, ..., l+224 in element order, and
// sub-block j (elements 32j..32j+31) reads bit j of each qh byte. The
// value is w = (d·sc[j])·q − dmin·m[j], q in 0..31 (ggml's
// dequantize_row_q5_K).

// Q5KBytes is the size of one Q5_K block.
const Q5KBytes = 176

// q5KQuant returns the 5-bit quant (0..31) of element e of a Q5_K block.
func q5KQuant(b *[Q5KBytes]byte, e int) uint8 {
	c, r := e/64, e%64
	l, hi := r%32, r/32
	lo := b[48+32*c+l] >> (4 * hi) & 0x0f
	return lo | (b[16+l]>>(2*c+hi)&1)<<4
}

// dequantQ5KBlock decodes one Q5_K block into dst[:256], rounding as
// dequantQ4KBlock does (d·sc and dmin·m exact, then the multiply and the
// subtraction each rounded).
func dequantQ5KBlock(dst []float32, blk []byte) {
	b := (*[Q5KBytes]byte)(blk)
	dst = dst[:KBlock]
	d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
	dmin := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	sc, m := UnpackQ4KScales((*[12]byte)(b[4:16]))
	for e := range dst {
		j := e / 32
		dj, mj := d*float32(sc[j]), dmin*float32(m[j])
		dst[e] = float32(dj*float32(q5KQuant(b, e))) - mj
	}
}

// quantizeQ5KBlock encodes 256 values as one Q5_K block with Q4_K's scale
// search (quantizeKMin) over 31 steps instead of 15.
func quantizeQ5KBlock(dst []byte, x []float32) {
	b := (*[Q5KBytes]byte)(dst)
	clear(b[:])
	fillQ5K(b, quantizeKMin((*[16]byte)(b[:16]), x, 31))
}

// fillQ5K stores 256 5-bit quants into a Q5_K block's qh and qs bytes, in
// the order q5KQuant reads them. qh must be zero.
func fillQ5K(b *[Q5KBytes]byte, qv *[KBlock]uint8) {
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			q0, q1 := qv[64*c+l], qv[64*c+32+l]
			b[48+32*c+l] = q0&0x0f | (q1&0x0f)<<4
			b[16+l] |= (q0>>4)<<(2*c) | (q1>>4)<<(2*c+1)
		}
	}
}
