//go:build amd64 && !purego

package kernels

import "unsafe"

// AVX-512 VNNI twins of the one- to four-token K-quant kernels
// (simd_q4k_vnni_amd64.s, simd_q5k_vnni_amd64.s, simd_q6k_vnni_amd64.s,
// simd_q3k_vnni_amd64.s; simd_kquant_vnni_amd64.h says how they keep the
// AVX2 kernels' integers). Each takes exactly its
// AVX2 twin's arguments and writes the same bits; they need hasVNNI.

// matQ4Kx1VNNI is matQ4Kx1 on VNNI.
//
//go:noescape
func matQ4Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ4Kx2VNNI is matQ4Kx2 on VNNI.
//
//go:noescape
func matQ4Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ4Kx4VNNI is matQ4Kx4 on VNNI.
//
//go:noescape
func matQ4Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ6Kx1VNNI is matQ6Kx1 on VNNI.
//
//go:noescape
func matQ6Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ6Kx2VNNI is matQ6Kx2 on VNNI.
//
//go:noescape
func matQ6Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ6Kx4VNNI is matQ6Kx4 on VNNI.
//
//go:noescape
func matQ6Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ5Kx1VNNI is matQ5Kx1 on VNNI.
//
//go:noescape
func matQ5Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ5Kx2VNNI is matQ5Kx2 on VNNI.
//
//go:noescape
func matQ5Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ5Kx4VNNI is matQ5Kx4 on VNNI.
//
//go:noescape
func matQ5Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ3Kx1VNNI is matQ3Kx1 on VNNI.
//
//go:noescape
func matQ3Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ3Kx2VNNI is matQ3Kx2 on VNNI.
//
//go:noescape
func matQ3Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ3Kx4VNNI is matQ3Kx4 on VNNI.
//
//go:noescape
func matQ3Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ2Kx1VNNI is matQ2Kx1 on VNNI.
//
//go:noescape
func matQ2Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ2Kx2VNNI is matQ2Kx2 on VNNI.
//
//go:noescape
func matQ2Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ2Kx4VNNI is matQ2Kx4 on VNNI.
//
//go:noescape
func matQ2Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
