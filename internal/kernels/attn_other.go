//go:build !amd64 || purego

package kernels

func expShiftSIMD(x []float32, m float32) int { panic("kernels: no SIMD kernels on this architecture") }

func siluMulSIMD(a, b []float32) int { panic("kernels: no SIMD kernels on this architecture") }

func headScoresSIMD(out []float32, outStride int, q []float32, hd int, k []float32, stride int, koff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func headAccumSIMD(o []float32, hd int, w []float32, wStride int, v []float32, stride int, voff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}
