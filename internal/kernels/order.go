package kernels

import "math"

// This file defines the canonical arithmetic that every path reproduces.
//
// F32, F16 and BF16 rows: 16 lane accumulators; lane j sums elements j,
// j+16, j+32, ... with a single-rounding fused multiply-add, starting from
// +0. The lanes are reduced by reduce16, and then the len%16 tail elements
// are added one by one, again with fused multiply-adds.
//
// Q8_0 and Q4_0 rows against Q8_0-quantised activations: one float32
// accumulator starting from +0. For each block b in turn, the scale is
// d = dw·dx (one float32 multiply), S is the exact integer sum of w[j]·x[j]
// over the block's 32 elements, and acc = fma(d, S, acc). The result is
// acc. Integer sums are exact in any order, so the SIMD code may form them
// however it likes; only the float operations above are fixed.
//
// Q4_K and Q6_K rows against the same Q8_0-quantised activations (32-
// element blocks; a 256-element weight block meets eight of them, block j
// of the eight lining up with elements 32j..32j+31): one float32
// accumulator starting from +0, visiting the activation blocks in order.
// For Q4_K, activation block j meets sub-block j with 6-bit scale sc and
// min m; with A = sc·Σq·x and B = m·Σx (exact integers, |A| < 2^22,
// |B| < 2^18) it does acc = fma(d·dx, A, acc) and then
// acc = fma(dmin·dx, −B, acc), d·dx and dmin·dx each one float32
// multiply. For Q6_K, activation block j covers sub-blocks 2j and 2j+1
// with int8 scales s0 and s1; with S = s0·Σ(q−32)·x over the first 16
// elements + s1·Σ(q−32)·x over the last 16 (exact, |S| < 2^24) it does
// acc = fma(d·dx, S, acc), as Q8_0 does. Q5_K is exactly Q4_K's arithmetic,
// its quants 0..31 instead of 0..15 (|A| < 2^23; q5k.go). kquant.go states this in Go;
// simd_kquant_amd64.s reproduces it four rows to a register, as the Q8_0
// kernels do (Q4_K's second term as VFNMADD231PS, the same operation).
//
// Q3_K and Q2_K have sixteen 16-element sub-blocks, so activation block j
// covers sub-blocks 2j and 2j+1, as for Q6_K (q3k.go). Q3_K is Q6_K's
// arithmetic: with signed 6-bit scales s0, s1 (stored value − 32) and
// levels q−4 in −4..3, S = s0·Σ(q−4)·x + s1·Σ(q−4)·x over the two halves
// (exact, |S| ≤ 2^19), acc = fma(d·dx, S, acc). Q2_K is Q4_K's, with both
// sub-blocks summed in integers first: A = sc0·Σq·x + sc1·Σq·x and
// B = m0·Σx + m1·Σx over the halves (4-bit scales and mins, exact:
// |A| < 2^18, |B| < 2^16), then acc = fma(d·dx, A, acc) and
// acc = fma(dmin·dx, −B, acc). simd_q3k_amd64.s reproduces both, and
// gemm_kquant_amd64.s for eight tokens at a time.
//
// Q5_0, Q4_1 and Q5_1 rows against the same activation blocks, one weight
// block to one activation block (legacy.go): Q5_0 is Q4_0's arithmetic,
// its quants 0..31 standing for q−16. Q4_1 and Q5_1 (w = q·d + m) add,
// per block, A = Σq·x and then B = Σx (exact integers, |A| < 2^17):
// acc = fma(d·dx, A, acc), then acc = fma(m·dx, B, acc), d·dx and m·dx
// each one float32 multiply, as Q4_K's two terms (with + for the min).
// simd_q41_amd64.s and simd_q5_amd64.s reproduce it four rows to a
// register, gemm_legacy_amd64.s eight tokens at a time.
//
// One accumulator per (row, token) is what lets the kernels lay a register
// out however suits them: the one- to four-token kernels hold four rows of
// one token in a register (the rows' sums reduced with in-lane unpacks),
// the batched kernels (gemm_q8_amd64.s, gemm_kquant_amd64.s,
// gemm_q5k_amd64.s and gemm_legacy_amd64.s) eight tokens of one row, with no
// reduction across lanes at all. Either way one convert, one multiply and
// one fused multiply-add serve several (row, token) pairs per block.
//
// Sixteen lanes for the plain types are what AVX2 holds in two ymm
// registers; two rows by three tokens (twelve accumulators) sharing one
// pass is the most the sixteen ymm registers can keep live.

// fma32 returns a·b+c rounded once to float32, as VFMADD does.
//
// The product of two float32 values is exact in float64, and TwoSum gives
// the exact error of the float64 sum. Rounding that sum to odd (forcing the
// last bit to 1 when the sum was inexact) and then to float32 is a single
// correct rounding, because float64 carries more than 24+2 bits; without the
// odd step a sum landing on a float32 halfway point would be rounded twice.
func fma32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b))
	cc := float64(c)
	s := p + cc
	if math.IsInf(s, 0) || s != s {
		// An infinite or NaN operand (p cannot overflow float64): the
		// sum is already the answer, and the error terms below would be
		// NaN and corrupt it.
		return float32(s)
	}
	bv := s - p
	e := (p - (s - bv)) + (cc - bv)
	if e != 0 {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// reduce8 sums eight lanes in the order the AVX2 code does: the upper half
// onto the lower half, then again, then the last pair.
func reduce8(l *[8]float32) float32 {
	m0, m1, m2, m3 := l[0]+l[4], l[1]+l[5], l[2]+l[6], l[3]+l[7]
	n0, n1 := m0+m2, m1+m3
	return n0 + n1
}

// reduce16 adds lane j+8 onto lane j and then reduces the eight lanes.
func reduce16(a *[16]float32) float32 {
	var l [8]float32
	for j := range l {
		l[j] = a[j] + a[j+8]
	}
	return reduce8(&l)
}
