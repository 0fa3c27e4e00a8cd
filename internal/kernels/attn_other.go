//go:build !amd64 || purego

package kernels

func dotRowsSIMD(out, q, k []float32, stride int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func axpyRowsSIMD(y, w, v []float32, stride int) {
	panic("kernels: no SIMD kernels on this architecture")
}

func expShiftSIMD(x []float32, m float32) int { panic("kernels: no SIMD kernels on this architecture") }

func siluMulSIMD(a, b []float32) int { panic("kernels: no SIMD kernels on this architecture") }
