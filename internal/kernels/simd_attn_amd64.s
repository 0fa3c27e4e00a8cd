//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_heads_amd64.h"

// EXPCORE sets Y4 to expf(Y0) lane by lane: each step the float32 operation
// expf in ops.go performs, in the same order and never fused, so the bits
// are the same. R9 points at expTable, Y14 holds 127 in every lane; Y1-Y3
// and Y5-Y8 are scratch.
#define EXPCORE \
	VBROADCASTSS 0(R9), Y1; \
	VMULPS Y1, Y0, Y1; \
	VBROADCASTSS 4(R9), Y2; \
	VADDPS Y2, Y1, Y1; \
	VROUNDPS $1, Y1, Y1; \
	VBROADCASTSS 8(R9), Y2; \
	VMULPS Y2, Y1, Y2; \
	VSUBPS Y2, Y0, Y3; \
	VBROADCASTSS 12(R9), Y2; \
	VMULPS Y2, Y1, Y2; \
	VSUBPS Y2, Y3, Y3; \
	VBROADCASTSS 16(R9), Y4; \
	VMULPS Y3, Y4, Y4; \
	VBROADCASTSS 20(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VBROADCASTSS 24(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VBROADCASTSS 28(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VBROADCASTSS 32(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VBROADCASTSS 36(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VMULPS Y3, Y3, Y5; \
	VMULPS Y5, Y4, Y4; \
	VADDPS Y3, Y4, Y4; \
	VBROADCASTSS 40(R9), Y2; \
	VADDPS Y2, Y4, Y4; \
	VCVTTPS2DQ Y1, Y6; \
	VPSRLD $31, Y6, Y7; \
	VPADDD Y7, Y6, Y7; \
	VPSRAD $1, Y7, Y7; \
	VPSUBD Y7, Y6, Y6; \
	VPADDD Y14, Y7, Y7; \
	VPSLLD $23, Y7, Y7; \
	VPADDD Y14, Y6, Y6; \
	VPSLLD $23, Y6, Y6; \
	VMULPS Y7, Y4, Y4; \
	VMULPS Y6, Y4, Y4; \
	VBROADCASTSS 44(R9), Y2; \
	VCMPPS $0x1e, Y2, Y0, Y8; \
	VBROADCASTSS 56(R9), Y2; \
	VBLENDVPS Y8, Y2, Y4, Y4; \
	VBROADCASTSS 48(R9), Y2; \
	VCMPPS $0x11, Y2, Y0, Y8; \
	VANDNPS Y4, Y8, Y4; \
	VCMPPS $3, Y0, Y0, Y8; \
	VBLENDVPS Y8, Y0, Y4, Y4

// The scale by 2^k is done as 2^h·2^(k-h), h = k/2 rounded toward zero,
// as expf does; then the range ends and NaN are patched in the order of
// expf's switch (x > hi gives +Inf, x < lo gives 0, NaN gives x).

// func expShiftSumAVX2(x *float32, n int, m float32, c *[expConsts]float32, sum *[4]float32)
//
// x[i] = expf(x[i]-m) for i < n, a multiple of 8, and sum[j] += x[i+j] over every i ≡ 0 (mod 4) below n
// after the exponential: each eight results go into the four-lane sum as
// their low half and then their high half, the order of Softmax's four
// partial sums.
TEXT ·expShiftSumAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), DX
	VBROADCASTSS m+16(FP), Y15
	MOVQ c+24(FP), R9
	MOVQ sum+32(FP), R10
	VMOVUPS (R10), X9
	TESTQ DX, DX
	JZ expsumdone
	VPBROADCASTD 52(R9), Y14

	PCALIGN $32
expsumloop:
	VMOVUPS (DI), Y0
	VSUBPS Y15, Y0, Y0
	EXPCORE
	VMOVUPS Y4, (DI)
	VADDPS X4, X9, X9
	VEXTRACTF128 $1, Y4, X10
	VADDPS X10, X9, X9
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ expsumloop

expsumdone:
	VMOVUPS X9, (R10)
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) (m float32, unordered bool)
//
// The largest of x[:n] (n a positive multiple of 8) by VMAXPS, and whether
// any of them is NaN, where VMAXPS and Go's max differ.
TEXT ·maxAVX2(SB), NOSPLIT, $0-21
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), DX
	VMOVUPS (DI), Y0
	VCMPPS $3, Y0, Y0, Y1
	ADDQ $32, DI
	SUBQ $8, DX
	JZ maxreduce

	PCALIGN $32
maxloop:
	VMOVUPS (DI), Y2
	VMAXPS Y2, Y0, Y0
	VCMPPS $3, Y2, Y2, Y3
	VORPS Y3, Y1, Y1
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ maxloop

maxreduce:
	VEXTRACTF128 $1, Y0, X2
	VMAXPS X2, X0, X0
	VPERMILPS $0x4e, X0, X2
	VMAXPS X2, X0, X0
	VPERMILPS $0xb1, X0, X2
	VMAXPS X2, X0, X0
	VMOVSS X0, m+16(FP)
	VMOVMSKPS Y1, AX
	TESTL AX, AX
	SETNE unordered+20(FP)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, s float32)
//
// x[i] *= s for i < n, a multiple of 8.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), DX
	VBROADCASTSS s+16(FP), Y1
	TESTQ DX, DX
	JZ scaledone

	PCALIGN $32
scaleloop:
	VMULPS (DI), Y1, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ scaleloop

scaledone:
	VZEROUPPER
	RET

// func siluMulAVX2(a, b *float32, n int, c *[expConsts]float32)
//
// a[i] = (a[i] / (1 + expf(-a[i]))) · b[i] for i < n, a multiple of 8, each
// operation rounded as SiLUMul's float32 expression rounds it.
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ n+16(FP), DX
	MOVQ c+24(FP), R9
	TESTQ DX, DX
	JZ siludone
	VPBROADCASTD 52(R9), Y14
	VBROADCASTSS 60(R9), Y15 // -0: the sign bit
	VBROADCASTSS 40(R9), Y12 // 1

	PCALIGN $32
siluloop:
	VMOVUPS (DI), Y13
	VXORPS Y15, Y13, Y0
	EXPCORE
	VADDPS Y12, Y4, Y4
	VDIVPS Y4, Y13, Y5
	VMULPS (SI), Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, DX
	JNZ siluloop

siludone:
	VZEROUPPER
	RET

// The float32 cache's steps for the bodies in simd_heads_amd64.h. The
// prefetch takes four 64-byte lines from the head's start (all of a
// 64-float head), eight rows ahead.
#define F32_PREFETCH \
	PREFETCHT0 (R10)(R11*1); \
	PREFETCHT0 64(R10)(R11*1); \
	PREFETCHT0 128(R10)(R11*1); \
	PREFETCHT0 192(R10)(R11*1)

#define F32_K16 \
	VMOVUPS (R10)(AX*4), Y8; \
	VMOVUPS 32(R10)(AX*4), Y9

#define F32_K1 VMOVSS (R10)(AX*4), X8
#define F32_V8 VMULPS (R10)(AX*4), Y15, Y8
#define F32_V1 VMULSS (R10)(AX*4), X15, X8

// F32_TAIL0 is empty: a float32 tail loads straight from the cache.
#define F32_TAIL0

// func headScoresAVX2(out *float32, outStrideBytes int, q *float32, hd int, k *float32, strideBytes int, koff *int32, nh, rows int)
//
// For each row of k in turn and each head h: out[h][row] = Dot(q_h,
// k[row][koff[h]:]), in matF32x1's order (16 lanes with FMA, REDUCE16,
// then the tail one element at a time), so each value has Dot's bits.
TEXT ·headScoresAVX2(SB), NOSPLIT, $0-72
	HEADSCORES(4, F32_PREFETCH, F32_K16, F32_TAIL0, F32_K1, X8)

// func headAccumAVX2(o *float32, hd int, w *float32, wStrideBytes int, v *float32, strideBytes int, voff *int32, nh, rows int)
//
// For each row of v in turn and each head h: o_h[j] += w[h][row] ·
// v[row][voff[h]+j], the product rounded before the add (VMULPS then
// VADDPS), as axpyGo does: per head, the bits of one Axpy per row.
TEXT ·headAccumAVX2(SB), NOSPLIT, $0-72
	HEADACCUM(4, F32_PREFETCH, F32_V8, F32_TAIL0, F32_V1)
