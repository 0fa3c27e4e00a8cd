//go:build amd64 && !purego

#include "textflag.h"

// func axpyRowsAVX2(y, w, v *float32, strideBytes, rows, cols int)
//
// y[j] += w[i]*v[i][j] for each row i in turn, the product rounded before
// the add (VMULPS then VADDPS), as axpyGo does. Columns go in blocks of 32
// (four accumulators live across all rows), then 8, then one at a time;
// each column's sum sees the rows in order, so the blocking changes nothing.
TEXT ·axpyRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ w+8(FP), R8
	MOVQ v+16(FP), SI
	MOVQ strideBytes+24(FP), R12
	MOVQ rows+32(FP), R13
	MOVQ cols+40(FP), DX
	TESTQ R13, R13
	JZ done
	XORQ AX, AX
	MOVQ DX, BX
	ANDQ $-32, BX

block32:
	CMPQ AX, BX
	JGE start8
	VMOVUPS (DI)(AX*4), Y0
	VMOVUPS 32(DI)(AX*4), Y1
	VMOVUPS 64(DI)(AX*4), Y2
	VMOVUPS 96(DI)(AX*4), Y3
	LEAQ (SI)(AX*4), R9
	XORQ CX, CX

	PCALIGN $32
rows32:
	VBROADCASTSS (R8)(CX*4), Y15
	VMULPS (R9), Y15, Y8
	VMULPS 32(R9), Y15, Y9
	VMULPS 64(R9), Y15, Y10
	VMULPS 96(R9), Y15, Y11
	VADDPS Y8, Y0, Y0
	VADDPS Y9, Y1, Y1
	VADDPS Y10, Y2, Y2
	VADDPS Y11, Y3, Y3
	ADDQ R12, R9
	INCQ CX
	CMPQ CX, R13
	JLT rows32
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	VMOVUPS Y2, 64(DI)(AX*4)
	VMOVUPS Y3, 96(DI)(AX*4)
	ADDQ $32, AX
	JMP block32

start8:
	MOVQ DX, BX
	ANDQ $-8, BX

block8:
	CMPQ AX, BX
	JGE block1
	VMOVUPS (DI)(AX*4), Y0
	LEAQ (SI)(AX*4), R9
	XORQ CX, CX

rows8:
	VBROADCASTSS (R8)(CX*4), Y15
	VMULPS (R9), Y15, Y8
	VADDPS Y8, Y0, Y0
	ADDQ R12, R9
	INCQ CX
	CMPQ CX, R13
	JLT rows8
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP block8

block1:
	CMPQ AX, DX
	JGE done
	VMOVSS (DI)(AX*4), X0
	LEAQ (SI)(AX*4), R9
	XORQ CX, CX

rows1:
	VMOVSS (R8)(CX*4), X15
	VMULSS (R9), X15, X8
	VADDSS X8, X0, X0
	ADDQ R12, R9
	INCQ CX
	CMPQ CX, R13
	JLT rows1
	VMOVSS X0, (DI)(AX*4)
	INCQ AX
	JMP block1

done:
	VZEROUPPER
	RET

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

// func expShiftAVX2(x *float32, n int, m float32, c *[expConsts]float32)
//
// x[i] = expf(x[i]-m) for i < n, a multiple of 8.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), DX
	VBROADCASTSS m+16(FP), Y15
	MOVQ c+24(FP), R9
	TESTQ DX, DX
	JZ expdone
	VPBROADCASTD 52(R9), Y14

	PCALIGN $32
exploop:
	VMOVUPS (DI), Y0
	VSUBPS Y15, Y0, Y0
	EXPCORE
	VMOVUPS Y4, (DI)
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ exploop

expdone:
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
