//go:build amd64 && !purego

package kernels

import "unsafe"

// gemmQ4Kx8VNNI is gemmQ4Kx8 on AVX-512 VNNI (gemm_kquant_vnni_amd64.s):
// the same arguments, the same interleaved activations (interleaveGroups)
// and the same bits; it needs hasVNNI.
//
//go:noescape
func gemmQ4Kx8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmQ50x8VNNI and gemmQ51x8VNNI are Q5_0's and Q5_1's eight-token
// kernels on AVX-512 VNNI (gemm_legacy_vnni_amd64.s), with their
// arguments and bits; they need hasVNNI.
//
//go:noescape
func gemmQ50x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ51x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmQ40x16VNNI, gemmQ41x16VNNI, gemmQ50x16VNNI and gemmQ51x16VNNI are
// the legacy types' sixteen-token kernels, gemmX16s in 512-bit registers, each
// block of four rows unpacked once for both groups of eight; the bits
// are the eight-token kernels' on each group.
//
//go:noescape
func gemmQ40x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ41x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ50x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ51x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
