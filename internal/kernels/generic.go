package kernels

import (
	"encoding/binary"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Pure-Go kernels. They define the canonical results (see order.go): the
// SIMD kernels are tested to agree with them bit for bit, and they run
// wherever no SIMD path is available.

// xBlockBytes is the size of one quantised activation block: a float32
// scale followed by 32 int8 values. Keeping the scale in float32 (the
// weights' own blocks use float16) loses nothing on the activation side.
const xBlockBytes = 36

// quantizeX encodes the activation row x (len a multiple of 32) into dst,
// len(x)/32 blocks of xBlockBytes. Its AVX2 twin (quantizeSIMD) is tested
// to write the same bytes, so the SIMD and Go kernels see the same integers.
func quantizeX(dst []byte, x []float32) {
	if useSIMD {
		quantizeSIMD(dst, x)
		return
	}
	quantizeGo(dst, x)
}

// quantizeGo is the canonical activation quantiser.
func quantizeGo(dst []byte, x []float32) {
	nb := len(x) / 32
	dst = dst[:nb*xBlockBytes]
	for b := 0; b < nb; b++ {
		src := x[b*32 : b*32+32]
		blk := dst[b*xBlockBytes : b*xBlockBytes+xBlockBytes]
		// Non-negative floats order like their bit patterns, so the
		// largest magnitude is an integer max of the sign-cleared bits.
		var amaxBits uint32
		for _, v := range src {
			amaxBits = max(amaxBits, math.Float32bits(v)&0x7fffffff)
		}
		d := math.Float32frombits(amaxBits) / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint32(blk, math.Float32bits(d))
		q := blk[4:36]
		for j, v := range src {
			// Adding and removing 1.5·2^23 rounds |y| < 2^22 to the
			// nearest integer, ties to even, in float32 arithmetic.
			y := float32(v * id)
			r := float32(y+roundMagic) - roundMagic
			// Clamping to ±127 keeps -128 out, which the sign trick in
			// the SIMD kernels could not negate. It is done in float32,
			// NaN going to -127 as VMAXPS sends it, so that even NaN and
			// infinite activations quantise the same on every path.
			if !(r >= -127) {
				r = -127
			}
			if r > 127 {
				r = 127
			}
			q[j] = byte(int8(r))
		}
	}
}

const roundMagic = 12582912 // 1.5·2^23

// weightAt returns element c of a plain-typed (F32, F16, BF16) row.
func weightAt(t tensor.DType, row []byte, c int) float32 {
	switch t {
	case tensor.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(row[4*c:]))
	case tensor.F16:
		return tensor.F16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	default: // BF16
		return tensor.BF16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	}
}

// dotPlainGo is the canonical dot product of a plain-typed row with x.
func dotPlainGo(t tensor.DType, row []byte, x []float32) float32 {
	n := len(x)
	var acc [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		for j := range acc {
			acc[j] = fma32(weightAt(t, row, i+j), x[i+j], acc[j])
		}
	}
	s := reduce16(&acc)
	for ; i < n; i++ {
		s = fma32(weightAt(t, row, i), x[i], s)
	}
	return s
}

// dotF32Go is dotPlainGo for float32 slices.
func dotF32Go(a, b []float32) float32 {
	n := len(a)
	var acc [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		for j := range acc {
			acc[j] = fma32(a[i+j], b[i+j], acc[j])
		}
	}
	s := reduce16(&acc)
	for ; i < n; i++ {
		s = fma32(a[i], b[i], s)
	}
	return s
}

// dotQuantGo is the canonical dot product of a Q8_0 or Q4_0 row with a
// quantised activation row xb of nb blocks (see order.go): one float32
// accumulator that adds, block by block, d·S for the block's exact integer
// sum S with one fused multiply-add.
func dotQuantGo(t tensor.DType, row, xb []byte, nb int) float32 {
	var acc float32
	bb := t.BlockBytes()
	for b := 0; b < nb; b++ {
		wb := row[b*bb : b*bb+bb]
		xk := xb[b*xBlockBytes : b*xBlockBytes+xBlockBytes]
		var s int32
		if t == tensor.Q8_0 {
			for j := 0; j < 32; j++ {
				s += int32(int8(wb[2+j])) * int32(int8(xk[4+j]))
			}
		} else {
			for j := 0; j < 16; j++ {
				s += (int32(wb[2+j]&0x0f) - 8) * int32(int8(xk[4+j]))
				s += (int32(wb[2+j]>>4) - 8) * int32(int8(xk[20+j]))
			}
		}
		dw := tensor.F16ToF32(binary.LittleEndian.Uint16(wb))
		dx := math.Float32frombits(binary.LittleEndian.Uint32(xk))
		// |S| <= 32·128·127 < 2^24: exact in float32.
		acc = fma32(float32(dw*dx), float32(s), acc)
	}
	return acc
}

// matRowsGo computes out[i*ostride+r] for rows r in [r0, r1) and tokens
// i < n. x holds the float activations (n rows of w.Cols) and xq their
// quantised blocks (for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants
// Q2_K to Q6_K).
func matRowsGo(w *Matrix, r0, r1 int, x []float32, xq []byte, n int, out []float32, ostride int) {
	rb, _ := w.Type.RowBytes(w.Cols)
	nb := w.Cols / 32
	for r := r0; r < r1; r++ {
		row := w.Data[r*rb : r*rb+rb]
		for i := 0; i < n; i++ {
			var v float32
			switch w.Type {
			case tensor.Q8_0, tensor.Q4_0:
				v = dotQuantGo(w.Type, row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q4_1, tensor.Q5_0, tensor.Q5_1:
				v = dotLegacyGo(w.Type, row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q4_K:
				v = dotQ4KGo(row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q5_K:
				v = dotQ5KGo(row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q6_K:
				v = dotQ6KGo(row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q3_K:
				v = dotQ3KGo(row, xq[i*nb*xBlockBytes:], nb)
			case tensor.Q2_K:
				v = dotQ2KGo(row, xq[i*nb*xBlockBytes:], nb)
			default:
				v = dotPlainGo(w.Type, row, x[i*w.Cols:i*w.Cols+w.Cols])
			}
			out[i*ostride+r] = v
		}
	}
}

// axpyGo is y += a·x with the product rounded before the add, as the SIMD
// code does it (VMULPS then VADDPS).
func axpyGo(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] = y[i] + float32(a*x[i])
	}
}

// hasQ8Min reports whether any weight of the Q8_0 blocks in data is -128.
func hasQ8Min(data []byte) bool {
	for b := 0; b+34 <= len(data); b += 34 {
		for _, v := range data[b+2 : b+34] {
			if v == 0x80 {
				return true
			}
		}
	}
	return false
}
