package kernels

import (
	"encoding/binary"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Q3_K and Q2_K rows against the quantised activation blocks (order.go for
// the arithmetic, package tensor's q3k.go for the layouts). Both have
// 16-element sub-blocks, so each 32-element activation block j covers two
// of them, 2j and 2j+1, and takes the two low bits of its elements from
// bits 2(j%4), 2(j%4)+1 of the 32 qs bytes of half j/4.

// dotQ3KGo is the canonical dot product of a Q3_K row with a quantised
// activation row xb of nb 32-element blocks (nb a multiple of 8). As for
// Q6_K, the two sub-blocks' integer sums times their signed scales add up
// exactly (at most 2·16·4·128·32 = 2^19) and one fused multiply-add per
// activation block adds them in.
func dotQ3KGo(row, xb []byte, nb int) float32 {
	var acc float32
	for k := 0; k < nb/8; k++ {
		wb := (*[tensor.Q3KBytes]byte)(row[k*tensor.Q3KBytes:])
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[108:]))
		sc := tensor.UnpackQ3KScales((*[12]byte)(wb[96:108]))
		xk := xb[8*k*xBlockBytes:]
		for j := 0; j < 8; j++ {
			qs := (*[32]byte)(wb[32+32*(j/4):])
			sh := uint(2 * (j % 4))
			x := (*[xBlockBytes]byte)(xk[j*xBlockBytes:])
			var s [2]int32
			for l, v := range qs {
				// The high bit of element 32j+l is bit j of hmask[l];
				// clear, it subtracts 4.
				q := int32(v>>sh&3|(wb[l]>>j&1)<<2) - 4
				s[l/16] += q * int32(int8(x[4+l]))
			}
			S := int32(sc[2*j])*s[0] + int32(sc[2*j+1])*s[1]
			dx := math.Float32frombits(binary.LittleEndian.Uint32(x[:]))
			acc = fma32(float32(d*dx), float32(S), acc)
		}
	}
	return acc
}

// dotQ2KGo is the canonical dot product of a Q2_K row with a quantised
// activation row xb of nb 32-element blocks (nb a multiple of 8). It is
// Q4_K's arithmetic with the two sub-blocks of an activation block summed
// in integers first: A = sc0·Σq·x + sc1·Σq·x and B = m0·Σx + m1·Σx over
// the block's two halves (exact: |A| < 2^18, |B| < 2^16), then
// acc = fma(d·dx, A, acc) and acc = fma(dmin·dx, −B, acc).
func dotQ2KGo(row, xb []byte, nb int) float32 {
	var acc float32
	for k := 0; k < nb/8; k++ {
		wb := (*[tensor.Q2KBytes]byte)(row[k*tensor.Q2KBytes:])
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[80:]))
		dmin := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[82:]))
		xk := xb[8*k*xBlockBytes:]
		for j := 0; j < 8; j++ {
			qs := (*[32]byte)(wb[16+32*(j/4):])
			sh := uint(2 * (j % 4))
			x := (*[xBlockBytes]byte)(xk[j*xBlockBytes:])
			var s, t [2]int32
			for l, v := range qs {
				a := int32(int8(x[4+l]))
				s[l/16] += int32(v>>sh&3) * a
				t[l/16] += a
			}
			s0, s1 := wb[2*j], wb[2*j+1]
			A := int32(s0&0x0f)*s[0] + int32(s1&0x0f)*s[1]
			B := int32(s0>>4)*t[0] + int32(s1>>4)*t[1]
			dx := math.Float32frombits(binary.LittleEndian.Uint32(x[:]))
			acc = fma32(float32(d*dx), float32(A), acc)
			acc = fma32(float32(dmin*dx), -float32(B), acc)
		}
	}
	return acc
}
