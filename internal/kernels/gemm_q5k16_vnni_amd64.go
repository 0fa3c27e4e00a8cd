//go:build amd64 && !purego

package kernels

import "unsafe"

// gemmQ5Kx16VNNI is gemmQ5Kx8 for sixteen tokens, the interleaved groups
// xa (tokens 0..7) and xb (8..15), on AVX-512 VNNI in 512-bit registers
// (gemm_q5k16_vnni_amd64.s): each superblock of four rows is unpacked
// once for all sixteen, and the bits are those of gemmQ5Kx8 on each
// group. It needs hasVNNI (vnniBatched picks it). On a Zen 4 it took
// 0.70-0.76 of the time of two gemmQ5Kx8 calls (one thread,
// BenchmarkGemmQ5K16VNNI).
//
//go:noescape
func gemmQ5Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
