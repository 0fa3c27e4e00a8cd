package kernels

import (
	"encoding/binary"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Q4_K and Q6_K rows against the same 32-element quantised activation
// blocks the Q8_0 and Q4_0 kernels use (see order.go for the arithmetic and
// package tensor's kquant.go for the block layouts). These define the
// results; on amd64 the assembly kernels (simd_q4k_amd64.s, simd_q6k_amd64.s,
// and gemm_kquant_amd64.s for eight tokens at a time) give the same bits and
// are what the SIMD dispatch runs. Each
// (row, token) pair is one scalar loop with one accumulator, so the result
// cannot depend on the batch or the threads.

// dotQ4KGo is the canonical dot product of a Q4_K row with a quantised
// activation row xb of nb 32-element blocks (nb a multiple of 8). Each
// activation block j of a weight block meets sub-block j: its integer sums
// Σq·x and Σx, times the sub-block's 6-bit scale and min, are exact (at
// most 63·32·15·127 < 2^22), and two fused multiply-adds add them in.
func dotQ4KGo(row, xb []byte, nb int) float32 {
	var acc float32
	for k := 0; k < nb/8; k++ {
		wb := (*[tensor.Q4KBytes]byte)(row[k*tensor.Q4KBytes:])
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[0:]))
		dmin := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[2:]))
		sc, m := tensor.UnpackQ4KScales((*[12]byte)(wb[4:16]))
		xk := xb[8*k*xBlockBytes:]
		for c := 0; c < 4; c++ {
			q := (*[32]byte)(wb[16+32*c:])
			x0 := (*[xBlockBytes]byte)(xk[2*c*xBlockBytes:])
			x1 := (*[xBlockBytes]byte)(xk[(2*c+1)*xBlockBytes:])
			var s0, s1, t0, t1 int32
			for l, v := range q {
				a, b := int32(int8(x0[4+l])), int32(int8(x1[4+l]))
				s0 += int32(v&0x0f) * a
				s1 += int32(v>>4) * b
				t0 += a
				t1 += b
			}
			dx0 := math.Float32frombits(binary.LittleEndian.Uint32(x0[:]))
			dx1 := math.Float32frombits(binary.LittleEndian.Uint32(x1[:]))
			acc = fma32(float32(d*dx0), float32(int32(sc[2*c])*s0), acc)
			acc = fma32(float32(dmin*dx0), -float32(int32(m[2*c])*t0), acc)
			acc = fma32(float32(d*dx1), float32(int32(sc[2*c+1])*s1), acc)
			acc = fma32(float32(dmin*dx1), -float32(int32(m[2*c+1])*t1), acc)
		}
	}
	return acc
}

// dotQ6KGo is the canonical dot product of a Q6_K row with a quantised
// activation row xb of nb 32-element blocks (nb a multiple of 8).
// Activation block j of a weight block covers its 16-element sub-blocks 2j
// and 2j+1; their integer sums times their int8 scales add up exactly (at
// most 2·16·32·127·128 < 2^24), so one fused multiply-add per block
// suffices, as for Q8_0.
func dotQ6KGo(row, xb []byte, nb int) float32 {
	var acc float32
	for k := 0; k < nb/8; k++ {
		wb := (*[tensor.Q6KBytes]byte)(row[k*tensor.Q6KBytes:])
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[208:]))
		xk := xb[8*k*xBlockBytes:]
		for j := 0; j < 8; j++ {
			// Block j is quarter j%4 of half j/4: its low four bits come
			// from the low (quarters 0, 1) or high (2, 3) nibbles of the
			// first (0, 2) or second (1, 3) 32 bytes of the half's ql,
			// its high two bits from bits 2·quarter of the half's qh.
			h, k4 := j/4, j%4
			ql := (*[32]byte)(wb[64*h+32*(k4&1):])
			qh := (*[32]byte)(wb[128+32*h:])
			lshift, hshift := uint(4*(k4>>1)), uint(2*k4)
			x := (*[xBlockBytes]byte)(xk[j*xBlockBytes:])
			var s0, s1 int32
			for l := 0; l < 16; l++ {
				q := int32((ql[l]>>lshift)&0x0f|((qh[l]>>hshift)&3)<<4) - 32
				s0 += q * int32(int8(x[4+l]))
			}
			for l := 16; l < 32; l++ {
				q := int32((ql[l]>>lshift)&0x0f|((qh[l]>>hshift)&3)<<4) - 32
				s1 += q * int32(int8(x[4+l]))
			}
			s := int32(int8(wb[192+2*j]))*s0 + int32(int8(wb[193+2*j]))*s1
			dx := math.Float32frombits(binary.LittleEndian.Uint32(x[:]))
			acc = fma32(float32(d*dx), float32(s), acc)
		}
	}
	return acc
}
