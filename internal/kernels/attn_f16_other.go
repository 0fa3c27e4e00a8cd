//go:build !amd64 || purego

package kernels

func headScoresF16SIMD(out []float32, outStride int, q []float32, hd int, k []uint16, stride int, koff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func headAccumF16SIMD(o []float32, hd int, w []float32, wStride int, v []uint16, stride int, voff []int32, rows int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func toF16SIMD(dst []uint16, src []float32) int {
	panic("kernels: no SIMD kernels on this architecture")
}

func fromF16SIMD(dst []float32, src []uint16) int {
	panic("kernels: no SIMD kernels on this architecture")
}
