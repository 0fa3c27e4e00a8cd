//go:build !amd64 || purego

package kernels

func expShiftSumSIMD(x []float32, m float32, sum *[4]float32) int {
	panic("kernels: no SIMD kernels on this architecture")
}

func maxSIMD(x []float32) (float32, int) { panic("kernels: no SIMD kernels on this architecture") }

func scaleSIMD(x []float32, s float32) int { panic("kernels: no SIMD kernels on this architecture") }

func siluMulSIMD(a, b []float32) int { panic("kernels: no SIMD kernels on this architecture") }

func headScoresSIMD(out []float32, outStride int, q []float32, hd int, k []float32, stride int, koff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func headAccumSIMD(o []float32, hd int, w []float32, wStride int, v []float32, stride int, voff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}
