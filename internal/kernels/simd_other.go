//go:build !amd64 || purego

package kernels

// No SIMD kernels on this architecture (or with the purego tag): the
// pure-Go kernels run, with the same results.

var hasAVX2 = false

var useSIMD = false

// No AVX-512 VNNI kernels either; the tests' switch between kernel
// families finds only the one.
var hasVNNI, useVNNI = false, false

func vnniOn() bool { return false }

func features() string { return "generic" }

func matRowsSIMD(w *Matrix, r0, r1 int, x []float32, xq, xi []byte, n int, out []float32, ostride int, _ *x16Stores) {
	panic("kernels: no SIMD kernels on this architecture")
}

func dotSIMD(a, b []float32) float32 { panic("kernels: no SIMD kernels on this architecture") }

func fmaAsm(a, b, c float32) float32 { return fma32(a, b, c) }

func quantizeSIMD(dst []byte, x []float32) { panic("kernels: no SIMD kernels on this architecture") }

func hasQ8MinSIMD(data []byte) bool { panic("kernels: no SIMD kernels on this architecture") }

// gemmInterleave is nil here: there is no eight-token kernel to feed.
func gemmInterleave(dst []byte, ps []Product, xq []byte, n int) []byte { return nil }

const peakQ8MACs, peakF32MACs = 0, 0

func peakQ8(rounds int)   { panic("kernels: no SIMD kernels on this architecture") }
func peakF32(rounds int)  { panic("kernels: no SIMD kernels on this architecture") }
func peakQ8_0(rounds int) { panic("kernels: no SIMD kernels on this architecture") }
