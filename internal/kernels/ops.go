package kernels

import (
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Features names the kernel path this process uses, for logs and
// benchmark output: "avx2 fma f16c", "avx2 fma f16c avx512-vnni" (AVX2
// kernels, with the 8-bit products of Q8_0, Q4_K and Q6_K weights, and
// some of the other K-quants', on AVX-512 VNNI) or
// "generic". The path changes speed only, never results.
func Features() string {
	if !useSIMD {
		return "generic"
	}
	return features()
}

// RowTo decodes row r of w into dst (len(dst) >= w.Cols), as an embedding
// lookup does. It panics if r is out of range.
func RowTo(dst []float32, w *Matrix, r int) {
	checkMatrix(w)
	if r < 0 || r >= w.Rows {
		panic(fmt.Sprintf("kernels: row %d of a %d-row matrix", r, w.Rows))
	}
	rb, _ := w.Type.RowBytes(w.Cols)
	if err := tensor.Dequantize(w.Type, dst[:w.Cols], w.Data[r*rb:r*rb+rb]); err != nil {
		panic("kernels: " + err.Error())
	}
}

// Dot returns Σ a[i]·b[i] over len(a) elements (b may be longer), reduced in
// the canonical order of order.go.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	if len(a) == 0 {
		return 0
	}
	if useSIMD {
		return dotSIMD(a, b)
	}
	return dotF32Go(a, b)
}

// RMSNorm sets out[i] = x[i] / sqrt(mean(x²)+eps) * weight[i] for i <
// len(x). out may be x.
func RMSNorm(out, x, weight []float32, eps float32) {
	n := len(x)
	if n == 0 {
		return
	}
	out, weight = out[:n], weight[:n]
	ss := Dot(x, x)
	mean := ss / float32(n)
	scale := float32(1 / math.Sqrt(float64(mean+eps)))
	for i, v := range x {
		out[i] = float32(v*scale) * weight[i]
	}
}

// Softmax replaces x with exp(x[i]-max x) / Σ exp(x[j]-max x). An empty x is
// left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	// The SIMD steps give the bits of the Go loops they stand for: the
	// exponentials are expf's, the sum keeps the four partial sums in
	// their order, the scaling is one rounding per element, and the
	// maximum is max's but perhaps for the sign of a zero maximum, which
	// changes no result: x - (+0) and x - (-0) differ only for x = ±0,
	// and the exponential of either zero is 1.
	m, i := x[0], 1
	if useSIMD {
		if v, n := maxSIMD(x); n > 0 {
			m, i = v, n
		}
	}
	for _, v := range x[i:] {
		m = max(m, v)
	}
	// The exponentials (eight at a time on the SIMD path, each the bits
	// of expf), then four partial sums combined in a fixed order: the
	// order depends on len(x) only.
	var s [4]float32
	i = 0
	if useSIMD {
		i = expShiftSumSIMD(x, m, &s)
	}
	for j := i; j < len(x); j++ {
		x[j] = expf(x[j] - m)
	}
	for ; i+4 <= len(x); i += 4 {
		s[0] += x[i]
		s[1] += x[i+1]
		s[2] += x[i+2]
		s[3] += x[i+3]
	}
	sum := (s[0] + s[1]) + (s[2] + s[3])
	for ; i < len(x); i++ {
		sum += x[i]
	}
	inv := 1 / sum
	i = 0
	if useSIMD {
		i = scaleSIMD(x, inv)
	}
	for ; i < len(x); i++ {
		x[i] *= inv
	}
}

// Argmax returns the index of the largest of x, the first if several are
// equal (+0 and -0 count as equal), and -1 for an empty x. A NaN is never
// the largest: it compares false with everything, as in the loop
// "if v > x[best]" from index 0, whose answer Argmax gives for every x.
func Argmax(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	if useSIMD {
		// With no NaN the loop's answer is the first index holding the
		// maximum. With one, the loop's answer depends on where the NaN
		// sits, so the loop runs.
		if m, n := maxSIMD(x); n > 0 {
			for _, v := range x[n:] {
				m = max(m, v)
			}
			if m == m {
				for i, v := range x {
					if v == m {
						return i
					}
				}
			}
		}
	}
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// SiLUMul sets a[i] = silu(a[i]) · b[i], silu(v) = v / (1+exp(-v)), for
// i < len(a).
func SiLUMul(a, b []float32) {
	b = b[:len(a)]
	i := 0
	if useSIMD {
		i = siluMulSIMD(a, b)
	}
	for ; i < len(a); i++ {
		v := a[i]
		a[i] = float32(v/(1+expf(-v))) * b[i]
	}
}

// Add sets dst[i] += src[i] for i < len(dst).
func Add(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// expf is e^x in float32 to within about 2 ulp (Cephes' polynomial). It is
// written out in float32 steps, each product converted explicitly so that
// the compiler cannot fuse it into an FMA on some targets only: the result
// must be the same on every machine. Results below the normal range flush
// to 0.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > expHi:
		return float32(math.Inf(1))
	case x < expLo:
		return 0
	}
	n := float32(math.Floor(float64(float32(x*expLog2e)) + 0.5))
	r := x - float32(n*expC1)
	r = r - float32(n*expC2)
	p := float32(1.9875691500e-4)
	p = float32(p*r) + 1.3981999507e-3
	p = float32(p*r) + 8.3334519073e-3
	p = float32(p*r) + 4.1665795894e-2
	p = float32(p*r) + 1.6666665459e-1
	p = float32(p*r) + 5.0000001201e-1
	y := float32(p*float32(r*r)) + r + 1
	// Scale by 2^n in two steps so that n = -127 or 128 (possible at the
	// range ends) does not need an out-of-range exponent.
	k := int32(n)
	h := k / 2
	return y * math.Float32frombits(uint32(h+127)<<23) * math.Float32frombits(uint32(k-h+127)<<23)
}

// expf's constants, shared with the SIMD table (attn_amd64.go).
const (
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expHi    = 88.72283
	expLo    = -87.33654
)
