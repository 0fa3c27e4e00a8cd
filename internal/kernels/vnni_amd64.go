//go:build amd64 && !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasVNNI reports whether this CPU (and OS) runs the AVX-512 VNNI
// kernels: VPDPBUSD on 256-bit registers (AVX512VL) and the EVEX forms
// of the byte and dword instructions around it (AVX512BW, AVX512F).
var hasVNNI = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI

// useVNNI selects the VNNI kernels for Q8_0 weights where the CPU has
// them. They give the same bits as the AVX2 ones (the integer sums are
// exact either way and the float steps are the same), so the choice is
// one of speed only; tests and benchmarks clear it to compare the two.
var useVNNI = hasVNNI

// vnniOn reports whether the VNNI kernels are in use: useSIMD too, since
// tests clear that to select the pure-Go kernels.
func vnniOn() bool { return useSIMD && useVNNI }

// gemmQ8x8VNNI is gemmQ8x8 on AVX-512 VNNI (gemm_q8vnni_amd64.s), for
// every tile: it takes weights of -128 too.
//
//go:noescape
func gemmQ8x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
