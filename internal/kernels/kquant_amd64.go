//go:build amd64 && !purego

package kernels

import "unsafe"

// Assembly kernels for Q4_K, Q5_K and Q6_K rows (simd_q4k_amd64.s,
// simd_q5k_amd64.s, simd_q6k_amd64.s; Q3_K and Q2_K below), with the
// signatures of the Q8_0 ones: rows in fours, nb the number of 32-element
// activation blocks (a multiple of 8, one 256-element superblock per 8),
// the x2 and x4 forms doing two or four tokens per pass over the weights.
// They give dotQ4KGo's, dotQ5KGo's and dotQ6KGo's bits.

//go:noescape
func matQ4Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ4Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ4Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ5Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ5Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ5Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// gemmQ5Kx8 (gemm_q5k_amd64.s) is gemmQ4Kx8 for Q5_K weights.
//
//go:noescape
func gemmQ5Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func matQ6Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ6Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ6Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// The Q3_K and Q2_K kernels (simd_q3k_amd64.s) give dotQ3KGo's and
// dotQ2KGo's bits.
//
//go:noescape
func matQ3Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ3Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ3Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ2Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ2Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ2Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
