package tensor

import (
	"encoding/binary"
	"math"
)

// The 2- and 3-bit K-quants. Both split a 256-element block into sixteen
// 16-element sub-blocks (sub-block s is elements 16s..16s+15) and share
// one element order for their 2-bit fields: element e = 128n+32j+l (half
// n = 0..1, shift j = 0..3, l = 0..31) keeps its two low bits in bits
// 2j, 2j+1 of qs[32n+l]. So a qs byte holds elements l, l+32, l+64, l+96
// of one half, lowest bits first (ggml's dequantize_row_q2_K and _q3_K).
//
// Q2_K, 84 bytes (block_q2_K):
//
//	[0:16]   scales: sub-block s's 4-bit scale in the low nibble of
//	         scales[s], its 4-bit min in the high nibble
//	[16:80]  qs: 256 2-bit quants
//	[80:82]  d     float16, scale of the sub-block scales
//	[82:84]  dmin  float16, scale of the sub-block mins
//
// w = (d·sc)·q − dmin·m, q in 0..3, rounded as Q4_K's decoder does.
//
// Q3_K, 110 bytes (block_q3_K):
//
//	[0:32]    hmask: the third (high) bit of every quant, element e's in
//	          bit e/32 of hmask[e%32]
//	[32:96]   qs: the low two bits
//	[96:108]  scales: sixteen 6-bit scales (UnpackQ3KScales), stored +32
//	[108:110] d float16
//
// w = (d·(sc−32))·(q − 4), q = low bits + 4·high bit in 0..7: a clear high
// bit subtracts 4 (so levels −4..3).

const (
	// Q2KBytes and Q3KBytes are the sizes of one Q2_K and one Q3_K block.
	Q2KBytes = 84
	Q3KBytes = 110
)

// UnpackQ3KScales decodes the 12 packed scale bytes of a Q3_K block into
// its sixteen signed scales (the stored 6-bit values minus 32). Scale s
// has its low four bits in the low nibble of byte s (s < 8) or the high
// nibble of byte s−8 (s ≥ 8), and its high two bits in bits 2(s/4),
// 2(s/4)+1 of byte 8+s%4.
func UnpackQ3KScales(p *[12]byte) (sc [16]int8) {
	for s := range sc {
		lo := p[s%8] >> (4 * (s / 8)) & 0x0f
		hi := p[8+s%4] >> (2 * (s / 4)) & 3
		sc[s] = int8(lo|hi<<4) - 32
	}
	return sc
}

// packQ3KScales is the inverse of UnpackQ3KScales; every value must lie
// in −32..31.
func packQ3KScales(p *[12]byte, sc *[16]int8) {
	*p = [12]byte{}
	for s, v := range sc {
		u := uint8(v + 32)
		p[s%8] |= (u & 0x0f) << (4 * (s / 8))
		p[8+s%4] |= (u >> 4) << (2 * (s / 4))
	}
}

// k2Bits returns the two low bits of element e from a 64-byte qs array in
// the order above.
func k2Bits(qs []byte, e int) uint8 {
	return qs[32*(e/128)+e%32] >> (2 * (e / 32 % 4)) & 3
}

// fillK2Bits stores the two low bits of the 256 quants into qs[:64] in
// the order k2Bits reads them. qs must be zero.
func fillK2Bits(qs []byte, qv *[KBlock]uint8) {
	for e, q := range qv {
		qs[32*(e/128)+e%32] |= (q & 3) << (2 * (e / 32 % 4))
	}
}

// dequantQ2KBlock decodes one Q2_K block into dst[:256].
func dequantQ2KBlock(dst []float32, blk []byte) {
	b := (*[Q2KBytes]byte)(blk)
	dst = dst[:KBlock]
	d := F16ToF32(binary.LittleEndian.Uint16(b[80:]))
	dmin := F16ToF32(binary.LittleEndian.Uint16(b[82:]))
	for e := range dst {
		s := b[e/16]
		dl, ml := d*float32(s&0x0f), dmin*float32(s>>4)
		dst[e] = float32(dl*float32(k2Bits(b[16:80], e))) - ml
	}
}

// q3KQuant returns the 3-bit quant (0..7, standing for q−4) of element e
// of a Q3_K block.
func q3KQuant(b *[Q3KBytes]byte, e int) uint8 {
	return k2Bits(b[32:96], e) | (b[e%32]>>(e/32)&1)<<2
}

// dequantQ3KBlock decodes one Q3_K block into dst[:256]: d·(sc−32)
// (exact in float32), times q−4.
func dequantQ3KBlock(dst []float32, blk []byte) {
	b := (*[Q3KBytes]byte)(blk)
	dst = dst[:KBlock]
	d := F16ToF32(binary.LittleEndian.Uint16(b[108:]))
	sc := UnpackQ3KScales((*[12]byte)(b[96:108]))
	for e := range dst {
		dl := d * float32(sc[e/16])
		dst[e] = dl * float32(int(q3KQuant(b, e))-4)
	}
}

// quantizeQ2KBlock encodes 256 values as one Q2_K block: Q4_K's affine
// scale search (affineKScales) over 16-element sub-blocks, 3 steps per
// sub-block and 4-bit scales and mins. llama.cpp's make_qkx2_quants
// searches around each sub-block's range for a smaller error; this does
// not.
func quantizeQ2KBlock(dst []byte, x []float32) {
	b := (*[Q2KBytes]byte)(dst)
	clear(b[:])
	var sc, m [16]uint8
	dh, mh := affineKScales(x, 16, 3, 15, sc[:], m[:])
	binary.LittleEndian.PutUint16(b[80:], dh)
	binary.LittleEndian.PutUint16(b[82:], mh)
	for s := range sc {
		b[s] = sc[s] | m[s]<<4
	}
	var qv [KBlock]uint8
	affineKQuants(x, 16, 3, F16ToF32(dh), F16ToF32(mh), sc[:], m[:], qv[:])
	fillK2Bits(b[16:80], &qv)
}

// quantizeQ3KBlock encodes 256 values as one Q3_K block with Q6_K's
// signed scale search (signedKScales): each sub-block's largest-magnitude
// value maps to level −4, the sub-block scales to 6 bits against the
// largest (at −32). llama.cpp's make_q3_quants refines each scale by
// least squares; this does not.
func quantizeQ3KBlock(dst []byte, x []float32) {
	b := (*[Q3KBytes]byte)(dst)
	clear(b[:])
	var sc [16]int8
	dh := signedKScales(x, 16, 4, 32, sc[:])
	binary.LittleEndian.PutUint16(b[108:], dh)
	packQ3KScales((*[12]byte)(b[96:108]), &sc)
	var qv [KBlock]uint8
	signedKQuants(x, 16, 4, F16ToF32(dh), sc[:], qv[:])
	fillK2Bits(b[32:96], &qv)
	for e, q := range qv {
		b[e%32] |= (q >> 2) << (e / 32)
	}
}

// affineKScales is the scale search of the K-quants with a min (Q2_K,
// Q4_K, Q5_K). Each sub-block of sub elements of x[:256] gets the affine
// range [min(0, lowest), highest] (the formats subtract a non-negative
// min, so a range cannot start above zero) over qmax steps; the ranges'
// scales and mins are then quantised to 0..smax against the block's
// largest into sc and m, and the float16 d and dmin returned.
func affineKScales(x []float32, sub, qmax, smax int, sc, m []uint8) (dh, mh uint16) {
	nsub := KBlock / sub
	scales, mins := make([]float32, nsub), make([]float32, nsub)
	var maxScale, maxMin float32
	for j := range scales {
		lo, hi := float32(0), float32(math.Inf(-1))
		for _, v := range x[sub*j : sub*j+sub] {
			lo, hi = min(lo, v), max(hi, v)
		}
		scales[j], mins[j] = (hi-lo)/float32(qmax), -lo
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var iscale, imin float32
	if maxScale > 0 {
		iscale = float32(smax) / maxScale
	}
	if maxMin > 0 {
		imin = float32(smax) / maxMin
	}
	for j := range scales {
		sc[j] = uint8(clampRound(iscale*scales[j], 0, smax))
		m[j] = uint8(clampRound(imin*mins[j], 0, smax))
	}
	return F32ToF16(maxScale / float32(smax)), F32ToF16(maxMin / float32(smax))
}

// affineKQuants rounds every value of x[:256] against the scale and min
// its sub-block actually stores (d·sc, dmin·m), so rounding of the scales
// costs no extra error, into qv, each in [0, qmax].
func affineKQuants(x []float32, sub, qmax int, d, dmin float32, sc, m, qv []uint8) {
	for j := range KBlock / sub {
		dj, mj := d*float32(sc[j]), dmin*float32(m[j])
		if dj == 0 {
			continue // every value decodes to −mj
		}
		for l, v := range x[sub*j : sub*j+sub] {
			qv[sub*j+l] = uint8(clampRound((v+mj)/dj, 0, qmax))
		}
	}
}

// signedKScales is the scale search of the symmetric K-quants (Q3_K,
// Q6_K), whose quants run over the asymmetric levels −qlo..qlo−1. Each
// sub-block of sub elements gets the scale that maps its largest-magnitude
// value (the first of equals) to −qlo, the end that holds one more step;
// the scales are quantised to −slo..slo−1 against the largest, which maps
// to −slo, into sc, and the float16 d is returned (0 for all zeros).
func signedKScales(x []float32, sub, qlo, slo int, sc []int8) (dh uint16) {
	nsub := KBlock / sub
	scales := make([]float32, nsub)
	var maxScale, amaxScale float32
	for j := range scales {
		var amax, vmax float32
		for _, v := range x[sub*j : sub*j+sub] {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, vmax = a, v
			}
		}
		scales[j] = vmax / -float32(qlo)
		if a := float32(math.Abs(float64(scales[j]))); a > amaxScale {
			amaxScale, maxScale = a, scales[j]
		}
	}
	if amaxScale == 0 {
		clear(sc[:nsub])
		return 0
	}
	iscale := -float32(slo) / maxScale
	for j := range scales {
		sc[j] = int8(clampRound(iscale*scales[j], -slo, slo-1))
	}
	return F32ToF16(1 / iscale)
}

// signedKQuants rounds every value of x[:256] against its sub-block's
// stored scale d·sc into qv, as q+qlo in 0..2·qlo−1 (qlo, the zero level,
// where the scale is zero).
func signedKQuants(x []float32, sub, qlo int, d float32, sc []int8, qv []uint8) {
	for e, v := range x[:KBlock] {
		dj := d * float32(sc[e/sub])
		if dj == 0 {
			qv[e] = uint8(qlo)
			continue
		}
		qv[e] = uint8(clampRound(v/dj, -qlo, qlo-1) + qlo)
	}
}
