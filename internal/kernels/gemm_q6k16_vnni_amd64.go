//go:build amd64 && !purego

package kernels

import "unsafe"

// gemmQ6Kx16VNNI is gemmQ6Kx8 for sixteen tokens on AVX-512 VNNI, the
// interleaved groups xa (tokens 0..7) and xb (8..15), in 512-bit
// registers (gemm_q6k16_vnni_amd64.s): each superblock of four rows is
// unpacked once for all sixteen, and the bits are those of gemmQ6Kx8 on
// each group. It needs hasVNNI.
//
//go:noescape
func gemmQ6Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmQ6Kx8VNNI is gemmQ6Kx8 on AVX-512 VNNI for one group of eight
// tokens (gemm_q6k16_vnni_amd64.s), gemmQ6Kx16VNNI in 256-bit registers:
// the same bits. It needs hasVNNI.
//
//go:noescape
func gemmQ6Kx8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
