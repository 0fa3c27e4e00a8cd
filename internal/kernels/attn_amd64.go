//go:build amd64 && !purego

package kernels

import (
	"math"
	"unsafe"
)

//go:noescape
func axpyRowsAVX2(y, w, v *float32, strideBytes, rows, cols int)

func dotRowsSIMD(out, q, k []float32, stride int) {
	// matF32x1 over rows stride floats apart is Dot per row: Dot itself
	// is matF32x1 over one row.
	matF32x1(unsafe.Pointer(&k[0]), stride*4, len(out), &q[0], len(q), &out[0])
}

func axpyRowsSIMD(y, w, v []float32, stride int) {
	axpyRowsAVX2(&y[0], &w[0], &v[0], stride*4, len(w), len(y))
}

//go:noescape
func expShiftAVX2(x *float32, n int, m float32, c *[expConsts]float32)

// expConsts is the length of expTable.
const expConsts = 16

// expTable holds expf's constants in the order expShiftAVX2 reads them,
// each converted to float32 exactly as expf's float32 expressions convert
// them.
var expTable = [expConsts]float32{
	0: float32(expLog2e), 1: 0.5, 2: float32(expC1), 3: float32(expC2),
	4: 1.9875691500e-4, 5: 1.3981999507e-3, 6: 8.3334519073e-3, 7: 4.1665795894e-2,
	8: 1.6666665459e-1, 9: 5.0000001201e-1, 10: 1,
	11: float32(expHi), 12: float32(expLo),
	13: math.Float32frombits(127), 14: float32(math.Inf(1)), 15: float32(math.Copysign(0, -1)),
}

func expShiftSIMD(x []float32, m float32) int {
	n := len(x) &^ 7
	if n > 0 {
		expShiftAVX2(&x[0], n, m, &expTable)
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
