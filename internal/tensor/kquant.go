package tensor

import (
	"encoding/binary"
	"math"
)

// K-quants: GGML's 256-element "super-blocks" (QK_K = 256).
//
// Q4_K, 144 bytes (block_q4_K):
//
//	[0:2]    d     float16, scale of the 6-bit sub-block scales
//	[2:4]    dmin  float16, scale of the 6-bit sub-block mins
//	[4:16]   scales: eight 6-bit scales sc[j] and eight 6-bit mins m[j]
//	         (see UnpackQ4KScales for the bit packing)
//	[16:144] qs: 256 4-bit quants
//
// Sub-block j (0..7) is elements 32j..32j+31, and element e = 64c+l (c =
// 0..3, l = 0..31) takes the low nibble of qs[32c+l]; element 64c+32+l
// takes its high nibble. So a byte holds elements l and l+32 of one
// 64-element chunk, not two neighbours. The value is
// w = (d·sc[j])·q − dmin·m[j], q in 0..15.
//
// Q6_K, 210 bytes (block_q6_K):
//
//	[0:128]   ql: low 4 bits of the 256 6-bit quants
//	[128:192] qh: high 2 bits
//	[192:208] scales: sixteen int8 scales, one per 16 elements
//	[208:210] d float16
//
// Each half h (elements 128h..128h+127) uses ql[64h:64h+64] and
// qh[32h:32h+32]. For l = 0..31, element 128h+32k+l (quarter k = 0..3)
// has its low four bits in the low nibble of ql[64h+l] (k=0), the low
// nibble of ql[64h+32+l] (k=1), the high nibble of ql[64h+l] (k=2) or the
// high nibble of ql[64h+32+l] (k=3), and its high two bits in bits 2k,2k+1
// of qh[32h+l]. The value is w = (d·scales[e/16])·(q−32), q in 0..63.

const (
	// KBlock is the number of elements in one K-quant block.
	KBlock = 256
	// Q4KBytes and Q6KBytes are the sizes of one Q4_K and one Q6_K block.
	Q4KBytes = 144
	Q6KBytes = 210
)

// UnpackQ4KScales decodes the 12 packed bytes of a Q4_K block into its
// eight 6-bit scales and mins. Sub-blocks 0..3 keep their scale in the low
// six bits of bytes 0..3 and their min in the low six bits of bytes 4..7.
// Sub-blocks 4..7 keep the low four bits of the scale in the low nibble of
// bytes 8..11 and of the min in the high nibble, and the high two bits of
// scale j in the top two bits of byte j-4 and of min j in those of byte j.
// This is ggml's get_scale_min_k4.
func UnpackQ4KScales(p *[12]byte) (sc, m [8]uint8) {
	for j := 0; j < 4; j++ {
		sc[j] = p[j] & 63
		m[j] = p[j+4] & 63
		sc[j+4] = p[j+8]&0x0f | (p[j]>>6)<<4
		m[j+4] = p[j+8]>>4 | (p[j+4]>>6)<<4
	}
	return sc, m
}

// packQ4KScales is the inverse of UnpackQ4KScales; every value must be
// below 64.
func packQ4KScales(p *[12]byte, sc, m *[8]uint8) {
	for j := 0; j < 4; j++ {
		p[j] = sc[j] | (sc[j+4]>>4)<<6
		p[j+4] = m[j] | (m[j+4]>>4)<<6
		p[j+8] = sc[j+4]&0x0f | (m[j+4]&0x0f)<<4
	}
}

// dequantQ4KBlock decodes one Q4_K block into dst[:256]. The per
// sub-block factors d·sc and dmin·m are float32 products (exact: an f16
// times a 6-bit integer), and each value is rounded after the multiply
// and again after the subtraction, as ggml's reference decoder does.
func dequantQ4KBlock(dst []float32, blk []byte) {
	b := (*[Q4KBytes]byte)(blk)
	dst = dst[:KBlock]
	d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
	dmin := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	sc, m := UnpackQ4KScales((*[12]byte)(b[4:16]))
	for c := 0; c < 4; c++ {
		d1, m1 := d*float32(sc[2*c]), dmin*float32(m[2*c])
		d2, m2 := d*float32(sc[2*c+1]), dmin*float32(m[2*c+1])
		q := (*[32]byte)(b[16+32*c:])
		lo := (*[32]float32)(dst[64*c:])
		hi := (*[32]float32)(dst[64*c+32:])
		for l, v := range q {
			lo[l] = float32(d1*float32(v&0x0f)) - m1
			hi[l] = float32(d2*float32(v>>4)) - m2
		}
	}
}

// q6KQuant returns the 6-bit quant (0..63) of element e of a Q6_K block.
func q6KQuant(b *[Q6KBytes]byte, e int) uint8 {
	h, r := e/128, e%128
	k, l := r/32, r%32
	ql := b[64*h+32*(k&1)+l]
	if k >= 2 {
		ql >>= 4
	}
	qh := b[128+32*h+l] >> (2 * k) & 3
	return ql&0x0f | qh<<4
}

// dequantQ6KBlock decodes one Q6_K block into dst[:256]: (d·scale)
// rounded to float32, times q−32.
func dequantQ6KBlock(dst []float32, blk []byte) {
	b := (*[Q6KBytes]byte)(blk)
	dst = dst[:KBlock]
	d := F16ToF32(binary.LittleEndian.Uint16(b[208:]))
	for e := range dst {
		s := d * float32(int8(b[192+e/16]))
		dst[e] = s * float32(int(q6KQuant(b, e))-32)
	}
}

// quantizeQ4KBlock encodes 256 values as one Q4_K block. Each 32-element
// sub-block gets the affine range [min(0, lowest), highest] (the format
// subtracts a non-negative min, so a range cannot start above zero); the
// ranges' scales and mins are then quantised to 6 bits against the
// block's largest, and every value is rounded against the scale and min
// actually stored, so rounding of the scales costs no extra error. This is
// simpler than llama.cpp's iterative search and a little less accurate.
func quantizeQ4KBlock(dst []byte, x []float32) {
	b := (*[Q4KBytes]byte)(dst)
	qv := quantizeKMin((*[16]byte)(b[:16]), x, 15)
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			b[16+32*c+l] = qv[64*c+l] | qv[64*c+32+l]<<4
		}
	}
}

// quantizeKMin is the scale search of Q4_K and Q5_K: it writes the
// block's header (d, dmin and the packed 6-bit scales and mins, 16 bytes)
// to hdr and returns the 256 quants, each in [0, qmax], from
// affineKScales and affineKQuants over 32-element sub-blocks.
func quantizeKMin(hdr *[16]byte, x []float32, qmax int) *[KBlock]uint8 {
	var sc, m [8]uint8
	dh, mh := affineKScales(x, 32, qmax, 63, sc[:], m[:])
	binary.LittleEndian.PutUint16(hdr[0:], dh)
	binary.LittleEndian.PutUint16(hdr[2:], mh)
	packQ4KScales((*[12]byte)(hdr[4:16]), &sc, &m)
	qv := new([KBlock]uint8)
	affineKQuants(x, 32, qmax, F16ToF32(dh), F16ToF32(mh), sc[:], m[:], qv[:])
	return qv
}

// quantizeQ6KBlock encodes 256 values as one Q6_K block. Each 16-element
// sub-block's scale maps its largest-magnitude value to −32 (the end of
// the asymmetric range −32..31 that holds one more step); the scales are
// quantised to int8 against the largest, which maps to −128, and every
// value is rounded against the scale actually stored. llama.cpp searches
// around each scale as well; this does not.
func quantizeQ6KBlock(dst []byte, x []float32) {
	b := (*[Q6KBytes]byte)(dst)
	clear(b[:])
	var sc [16]int8
	dh := signedKScales(x, 16, 32, 128, sc[:])
	binary.LittleEndian.PutUint16(b[208:], dh)
	for j, v := range sc {
		b[192+j] = byte(v)
	}
	var qv [KBlock]uint8
	signedKQuants(x, 16, 32, F16ToF32(dh), sc[:], qv[:])
	fillQ6K(b, func(e int) uint8 { return qv[e] })
}

// fillQ6K stores the 6-bit quants q(e) of a Q6_K block into its ql and qh
// bytes, in the order q6KQuant reads them.
func fillQ6K(b *[Q6KBytes]byte, q func(e int) uint8) {
	for h := 0; h < 2; h++ {
		for l := 0; l < 32; l++ {
			e := 128*h + l
			q0, q1, q2, q3 := q(e), q(e+32), q(e+64), q(e+96)
			b[64*h+l] = q0&0x0f | (q2&0x0f)<<4
			b[64*h+32+l] = q1&0x0f | (q3&0x0f)<<4
			b[128+32*h+l] = q0>>4 | (q1>>4)<<2 | (q2>>4)<<4 | (q3>>4)<<6
		}
	}
}

// clampRound rounds v to the nearest integer, ties to even, clamped to
// [lo, hi]. NaN goes to lo, so no input can make an out-of-range quant.
func clampRound(v float32, lo, hi int) int {
	r := math.RoundToEven(float64(v))
	if !(r >= float64(lo)) {
		return lo
	}
	if r > float64(hi) {
		return hi
	}
	return int(r)
}
