//go:build amd64 && !purego

package kernels

import "unsafe"

// gemmQ4Kx8VNNI is gemmQ4Kx8 on AVX-512 VNNI (gemm_kquant_vnni_amd64.s):
// the same arguments, the same interleaved activations (interleaveGroups)
// and the same bits; it needs hasVNNI.
//
//go:noescape
func gemmQ4Kx8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
