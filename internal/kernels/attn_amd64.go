//go:build amd64 && !purego

package kernels

import "math"

// expConsts is the length of expTable.
const expConsts = 16

// expTable holds expf's constants in the order expShiftSumAVX2 and siluMulAVX2 read them,
// each converted to float32 exactly as expf's float32 expressions convert
// them.
var expTable = [expConsts]float32{
	0: float32(expLog2e), 1: 0.5, 2: float32(expC1), 3: float32(expC2),
	4: 1.9875691500e-4, 5: 1.3981999507e-3, 6: 8.3334519073e-3, 7: 4.1665795894e-2,
	8: 1.6666665459e-1, 9: 5.0000001201e-1, 10: 1,
	11: float32(expHi), 12: float32(expLo),
	13: math.Float32frombits(127), 14: float32(math.Inf(1)), 15: float32(math.Copysign(0, -1)),
}

//go:noescape
func expShiftSumAVX2(x *float32, n int, m float32, c *[expConsts]float32, sum *[4]float32)

// expShiftSumSIMD sets x[i] = expf(x[i]-m) for the longest multiple of 8
// of x, adds them into Softmax's four partial sums in their order, and
// returns how many it did.
func expShiftSumSIMD(x []float32, m float32, sum *[4]float32) int {
	n := len(x) &^ 7
	if n > 0 {
		expShiftSumAVX2(&x[0], n, m, &expTable, sum)
	}
	return n
}

//go:noescape
func maxAVX2(x *float32, n int) (m float32, unordered bool)

// maxSIMD returns the largest of the longest multiple of 8 of x and that
// count, or a count of 0 where a NaN is among them: VMAXPS and Go's max
// disagree on NaN. A zero maximum may carry either sign (VMAXPS picks by
// operand order, max prefers +0).
func maxSIMD(x []float32) (float32, int) {
	n := len(x) &^ 7
	if n == 0 {
		return 0, 0
	}
	m, unordered := maxAVX2(&x[0], n)
	if unordered {
		return 0, 0
	}
	return m, n
}

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

// scaleSIMD multiplies the longest multiple of 8 of x by s and returns
// how many it did.
func scaleSIMD(x []float32, s float32) int {
	n := len(x) &^ 7
	if n > 0 {
		scaleAVX2(&x[0], n, s)
	}
	return n
}

//go:noescape
func siluMulAVX2(a, b *float32, n int, c *[expConsts]float32)

func siluMulSIMD(a, b []float32) int {
	n := len(a) &^ 7
	if n > 0 {
		_ = b[n-1]
		siluMulAVX2(&a[0], &b[0], n, &expTable)
	}
	return n
}

//go:noescape
func headScoresAVX2(out *float32, outStrideBytes int, q *float32, hd int, k *float32, strideBytes int, koff *int32, nh, rows int)

//go:noescape
func headAccumAVX2(o *float32, hd int, w *float32, wStrideBytes int, v *float32, strideBytes int, voff *int32, nh, rows int)

func headScoresSIMD(out []float32, outStride int, q []float32, hd int, k []float32, stride int, koff []int32, rows int) {
	headScoresAVX2(&out[0], outStride*4, &q[0], hd, &k[0], stride*4, &koff[0], len(koff), rows)
}

func headAccumSIMD(o []float32, hd int, w []float32, wStride int, v []float32, stride int, voff []int32, rows int) {
	headAccumAVX2(&o[0], hd, &w[0], wStride*4, &v[0], stride*4, &voff[0], len(voff), rows)
}
