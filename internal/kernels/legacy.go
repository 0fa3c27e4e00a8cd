package kernels

import (
	"encoding/binary"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Q4_1, Q5_0 and Q5_1 rows (GGML's other 32-element types; package
// tensor's legacy.go has the layouts) against the same quantised activation
// blocks as Q8_0 and Q4_0: one weight block meets one activation block.
// These define the results (order.go); on amd64 simd_q41_amd64.s and
// simd_q5_amd64.s give the same bits with four rows and up to four tokens
// per pass, and gemm_legacy_amd64.s with four rows by eight tokens
// (prefill, as for Q8_0 and the K-quants).

// legacyType reports whether t is one of the types dotLegacyGo multiplies.
func legacyType(t tensor.DType) bool {
	return t == tensor.Q4_1 || t == tensor.Q5_0 || t == tensor.Q5_1
}

// dotLegacyGo is the canonical dot product of a Q4_1, Q5_0 or Q5_1 row with
// a quantised activation row xb of nb blocks. Q5_0 is Q4_0's arithmetic
// with quants 0..31 standing for q−16: S = Σ(q−16)·x exact (|S| < 2^17),
// acc = fma(d·dx, S, acc). For Q4_1 and Q5_1 (w = q·d + m) the block adds
// A = Σq·x and then B = Σx, both exact integers (|A| < 2^17, |B| < 2^12):
// acc = fma(d·dx, A, acc), then acc = fma(m·dx, B, acc), each scale product
// one float32 multiply. That is llama.cpp's split of the same sum (its
// Q8_1 activation blocks carry dx·Σx for the second term).
func dotLegacyGo(t tensor.DType, row, xb []byte, nb int) float32 {
	var acc float32
	bb := t.BlockBytes()
	// Where the nibbles and the fifth bits start in a block.
	qsOff, qhOff := 4, -1
	switch t {
	case tensor.Q5_0:
		qsOff, qhOff = 6, 2
	case tensor.Q5_1:
		qsOff, qhOff = 8, 4
	}
	for b := 0; b < nb; b++ {
		wb := row[b*bb : b*bb+bb]
		xk := xb[b*xBlockBytes : b*xBlockBytes+xBlockBytes]
		var qh uint32
		if qhOff >= 0 {
			qh = binary.LittleEndian.Uint32(wb[qhOff:])
		}
		qs := wb[qsOff : qsOff+16]
		var s, sx int32
		for j := 0; j < 16; j++ {
			x0, x1 := int32(int8(xk[4+j])), int32(int8(xk[20+j]))
			q0 := int32(qs[j]&0x0f) | int32(qh>>uint(j)&1)<<4
			q1 := int32(qs[j]>>4) | int32(qh>>uint(j+16)&1)<<4
			s += q0*x0 + q1*x1
			sx += x0 + x1
		}
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb))
		dx := math.Float32frombits(binary.LittleEndian.Uint32(xk))
		if t == tensor.Q5_0 {
			acc = fma32(float32(d*dx), float32(s-16*sx), acc)
			continue
		}
		m := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[2:]))
		acc = fma32(float32(d*dx), float32(s), acc)
		acc = fma32(float32(m*dx), float32(sx), acc)
	}
	return acc
}
