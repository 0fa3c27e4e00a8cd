//go:build amd64 && !purego

package kernels

import "unsafe"

// Assembly kernels for Q4_1, Q5_0 and Q5_1 rows (simd_q41_amd64.s,
// simd_q5_amd64.s), with the signatures of the Q4_0 ones: rows in fours,
// nb 32-element blocks, the x2 and x4 forms doing two or four tokens per
// pass over the weights. They give dotLegacyGo's bits.

//go:noescape
func matQ41x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ41x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ41x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ50x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ50x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ50x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ51x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ51x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ51x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
