//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_heads_amd64.h"

// The F16 attention kernels are headScoresAVX2 and headAccumAVX2
// (simd_attn_amd64.s) instruction for instruction, the bodies shared in
// simd_heads_amd64.h, except that each load of a key or value reads
// binary16 and widens it with VCVTPH2PS, which is exact: so every result
// has the float32 kernel's bits on the widened cache. A single half in a
// tail is inserted with VPINSRW into a register zeroed once by the TAIL0
// step (no general register is free) and widened the same way.

// Eight rows ahead, as the float32 kernel; a row's head is half the
// bytes, so two lines cover what its four do.
#define F16_PREFETCH \
	PREFETCHT0 (R10)(R11*1); \
	PREFETCHT0 64(R10)(R11*1)

#define F16_K16 \
	VCVTPH2PS (R10)(AX*2), Y8; \
	VCVTPH2PS 16(R10)(AX*2), Y9

#define F16_K0 VPXOR X8, X8, X8

#define F16_K1 \
	VPINSRW $0, (R10)(AX*2), X8, X8; \
	VCVTPH2PS X8, X9

#define F16_V8 \
	VCVTPH2PS (R10)(AX*2), Y9; \
	VMULPS Y9, Y15, Y8

#define F16_V0 VPXOR X9, X9, X9

#define F16_V1 \
	VPINSRW $0, (R10)(AX*2), X9, X9; \
	VCVTPH2PS X9, X10; \
	VMULSS X10, X15, X8

// func headScoresF16AVX2(out *float32, outStrideBytes int, q *float32, hd int, k *uint16, strideBytes int, koff *int32, nh, rows int)
//
// For each row of k in turn and each head h: out[h][row] = Dot(q_h,
// widen(k[row][koff[h]:])), in matF32x1's order (16 lanes with FMA,
// REDUCE16, then the tail one element at a time).
TEXT ·headScoresF16AVX2(SB), NOSPLIT, $0-72
	HEADSCORES(2, F16_PREFETCH, F16_K16, F16_K0, F16_K1, X9)

// func headAccumF16AVX2(o *float32, hd int, w *float32, wStrideBytes int, v *uint16, strideBytes int, voff *int32, nh, rows int)
//
// For each row of v in turn and each head h: o_h[j] += w[h][row] ·
// widen(v[row][voff[h]+j]), the product rounded before the add (VMULPS
// then VADDPS), as axpyGo does.
TEXT ·headAccumF16AVX2(SB), NOSPLIT, $0-72
	HEADACCUM(2, F16_PREFETCH, F16_V8, F16_V0, F16_V1)

// func toF16AVX2(dst *uint16, src *float32, n int)
//
// dst[i] = binary16(src[i]) for i < n, a multiple of 8, rounding to
// nearest even (rounding control 0, not MXCSR's).
TEXT ·toF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), DX
	TESTQ DX, DX
	JZ tohdone

	PCALIGN $32
tohloop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, DX
	JNZ tohloop

tohdone:
	VZEROUPPER
	RET

// func fromF16AVX2(dst *float32, src *uint16, n int)
//
// dst[i] = float32(src[i]) for i < n, a multiple of 8; exact.
TEXT ·fromF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), DX
	TESTQ DX, DX
	JZ fromhdone

	PCALIGN $32
fromhloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ fromhloop

fromhdone:
	VZEROUPPER
	RET
