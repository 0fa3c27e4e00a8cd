package kernels

import (
	"encoding/binary"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// dotQ5KGo is the canonical dot product of a Q5_K row with a quantised
// activation row xb of nb 32-element blocks (nb a multiple of 8). It is
// dotQ4KGo with a fifth bit on each quant (bit j of qh[l] for element l of
// sub-block j): the same two fused multiply-adds per activation block, and
// the integer sums are still exact (Σq·x times the scale is at most
// 63·32·31·127 < 2^23).
func dotQ5KGo(row, xb []byte, nb int) float32 {
	var acc float32
	for k := 0; k < nb/8; k++ {
		wb := (*[tensor.Q5KBytes]byte)(row[k*tensor.Q5KBytes:])
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[0:]))
		dmin := tensor.F16ToF32(binary.LittleEndian.Uint16(wb[2:]))
		sc, m := tensor.UnpackQ4KScales((*[12]byte)(wb[4:16]))
		qh := (*[32]byte)(wb[16:48])
		xk := xb[8*k*xBlockBytes:]
		for c := 0; c < 4; c++ {
			q := (*[32]byte)(wb[48+32*c:])
			x0 := (*[xBlockBytes]byte)(xk[2*c*xBlockBytes:])
			x1 := (*[xBlockBytes]byte)(xk[(2*c+1)*xBlockBytes:])
			sh := uint(2 * c)
			var s0, s1, t0, t1 int32
			for l, v := range q {
				a, b := int32(int8(x0[4+l])), int32(int8(x1[4+l]))
				h := qh[l] >> sh
				s0 += int32(v&0x0f|(h&1)<<4) * a
				s1 += int32(v>>4|(h&2)<<3) * b
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
