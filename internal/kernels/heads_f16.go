package kernels

import (
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// The F16 twins of HeadScores and HeadAccum read keys and values stored as
// IEEE binary16, half the bytes of float32, which is what decode attention
// is bound by once the cache is long. Each half is widened to float32
// exactly (every binary16 value is a float32 value) and then takes part in
// exactly the arithmetic of the float32 kernel, in the same order: so
// HeadScoresF16 on k gives the bits HeadScores gives on k widened, on
// every path, and the batch-invariance argument of the float32 kernels
// carries over unchanged.

// HeadScoresF16 is HeadScores over keys stored as binary16.
func HeadScoresF16(out []float32, outStride int, q []float32, hd int, k []uint16, stride int, koff []int32, rows int) {
	nh := len(koff)
	if nh == 0 || rows == 0 {
		return
	}
	checkHeads("HeadScoresF16", "halves", nh, hd, len(q), len(k), stride, koff, rows)
	checkHeadRows("HeadScoresF16", "out", nh, rows, outStride, len(out))
	if hd == 0 {
		for h := 0; h < nh; h++ {
			clear(out[h*outStride : h*outStride+rows])
		}
		return
	}
	if useSIMD {
		headScoresF16SIMD(out, outStride, q, hd, k, stride, koff, rows)
		return
	}
	headScoresF16Go(out, outStride, q, hd, k, stride, koff, rows)
}

// HeadAccumF16 is HeadAccum over values stored as binary16.
func HeadAccumF16(o []float32, hd int, w []float32, wStride int, v []uint16, stride int, voff []int32, rows int) {
	nh := len(voff)
	if nh == 0 || rows == 0 || hd == 0 {
		return
	}
	checkHeads("HeadAccumF16", "halves", nh, hd, len(o), len(v), stride, voff, rows)
	checkHeadRows("HeadAccumF16", "weight", nh, rows, wStride, len(w))
	if useSIMD {
		headAccumF16SIMD(o, hd, w, wStride, v, stride, voff, rows)
		return
	}
	headAccumF16Go(o, hd, w, wStride, v, stride, voff, rows)
}

// ToF16 converts src to binary16 into dst (len(dst) >= len(src)), rounding
// to nearest even. For every input but NaN the result is
// tensor.F32ToF16's; a NaN keeps its sign and top payload bits, with the
// quiet bit set (what VCVTPS2PH does, see f32ToF16).
func ToF16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic(fmt.Sprintf("kernels: ToF16 of %d floats into %d halves", len(src), len(dst)))
	}
	i := 0
	if useSIMD {
		i = toF16SIMD(dst, src)
	}
	for ; i < len(src); i++ {
		dst[i] = f32ToF16(src[i])
	}
}

// FromF16 converts src to float32 into dst (len(dst) >= len(src)); exact.
// For every input but a signalling NaN the result is tensor.F16ToF32's;
// a signalling NaN comes back quiet (what VCVTPH2PS does, see f16ToF32).
func FromF16(dst []float32, src []uint16) {
	if len(dst) < len(src) {
		panic(fmt.Sprintf("kernels: FromF16 of %d halves into %d floats", len(src), len(dst)))
	}
	i := 0
	if useSIMD {
		i = fromF16SIMD(dst, src)
	}
	for ; i < len(src); i++ {
		dst[i] = f16ToF32(src[i])
	}
}

// headScoresF16Go is HeadScores' Go loop with each key widened as it is
// read: dotF16Go has dotF32Go's order, so the bits are the same.
func headScoresF16Go(out []float32, outStride int, q []float32, hd int, k []uint16, stride int, koff []int32, rows int) {
	for i := 0; i < rows; i++ {
		for h, off := range koff {
			r := i*stride + int(off)
			out[h*outStride+i] = dotF16Go(q[h*hd:(h+1)*hd], k[r:r+hd])
		}
	}
}

// headAccumF16Go is HeadAccum's Go loop with each value widened as it is
// read.
func headAccumF16Go(o []float32, hd int, w []float32, wStride int, v []uint16, stride int, voff []int32, rows int) {
	for i := 0; i < rows; i++ {
		for h, off := range voff {
			r := i*stride + int(off)
			axpyF16Go(o[h*hd:(h+1)*hd], w[h*wStride+i], v[r:r+hd])
		}
	}
}

// dotF16Go is dotF32Go (generic.go) with b stored as binary16: sixteen
// lane accumulators by fused multiply-add, reduce16, then the tail one
// element at a time into the sum.
func dotF16Go(a []float32, b []uint16) float32 {
	n := len(a)
	b = b[:n]
	var acc [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		for j := range acc {
			acc[j] = fma32(a[i+j], f16ToF32(b[i+j]), acc[j])
		}
	}
	s := reduce16(&acc)
	for ; i < n; i++ {
		s = fma32(a[i], f16ToF32(b[i]), s)
	}
	return s
}

// axpyF16Go is axpyGo with x stored as binary16. The conversion of the
// product rounds it before the add: it forbids the compiler to fuse them.
func axpyF16Go(y []float32, a float32, x []uint16) {
	x = x[:len(y)]
	for i := range y {
		y[i] = y[i] + float32(a*f16ToF32(x[i]))
	}
}

// f16ToF32 widens a binary16 value to float32 as VCVTPH2PS does: exactly,
// like tensor.F16ToF32, except that a signalling NaN comes back with the
// quiet bit set (the instruction quiets it; tensor.F16ToF32 keeps it
// signalling). A finite half is its bits moved into a float32's places
// and scaled by 2^112, the difference of the exponent biases: exact for
// subnormal halves too, and small enough to inline in the Go loops.
func f16ToF32(h uint16) float32 {
	b := uint32(h&0x7fff) << 13
	if h&0x7c00 == 0x7c00 {
		if h&0x3ff != 0 {
			b |= 0x400000
		}
		return math.Float32frombits(uint32(h&0x8000)<<16 | b | 0x7f800000)
	}
	return math.Float32frombits(uint32(h&0x8000)<<16|b) * 0x1p112
}

// f32ToF16 narrows a float32 to binary16 as VCVTPS2PH with rounding
// control 0 does: round to nearest even, overflow to infinity, exactly
// tensor.F32ToF16 for every non-NaN input. For a NaN it differs from
// tensor.F32ToF16, which returns the canonical quiet NaN: the instruction
// keeps the sign and the top ten payload bits and sets the quiet bit.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff
	}
	return tensor.F32ToF16(f)
}
