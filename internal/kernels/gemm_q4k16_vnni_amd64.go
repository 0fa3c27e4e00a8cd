//go:build amd64 && !purego

package kernels

import "unsafe"

// gemmQ4Kx16VNNI is gemmQ4Kx8VNNI for sixteen tokens, the interleaved
// groups xa (tokens 0..7) and xb (8..15), in 512-bit registers
// (gemm_q4k16_vnni_amd64.s): each superblock of four rows is unpacked
// once for all sixteen, and the bits are those of gemmQ4Kx8 on each
// group. It needs hasVNNI.
//
//go:noescape
func gemmQ4Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
