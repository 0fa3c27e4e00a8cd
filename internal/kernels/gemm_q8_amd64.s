//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"

// The batched Q8_0 kernel: four weight rows by eight tokens per pass, each
// register holding one row's value for the eight tokens, so the block sums
// S of order.go come out of VPMADDUBSW/VPMADDWD/VPADDD with no reduction
// across lanes, and one convert, multiply and FMA per (row, block) serve
// eight tokens.
//
// The activations are first interleaved (qInterleave8) so that one 32-byte
// load holds elements 4g..4g+3 of block b for all eight tokens. A weight's
// four bytes are broadcast to the eight lanes, signed by x (VPSIGNB) and
// multiplied with |x|. Signing the weight cannot negate -128, so the Go
// side only calls this kernel on tiles it has scanned (q8HasMin) and found
// free of -128; others take the four-row kernels, which give the same bits.

// Interleaved block layout, xiBlock (576) bytes per block of eight tokens:
//   0   dx of tokens 0..7, float32
//   32  8·Σx of tokens 0..7, int32 (for Q4_0's offset weights)
//   64  X_g for g = 0..7: 32 bytes, token t's elements 4g..4g+3 at 4t
//   320 |X_g| likewise

DATA i8Ones<>+0(SB)/8, $0x0101010101010101
DATA i8Ones<>+8(SB)/8, $0x0101010101010101
DATA i8Ones<>+16(SB)/8, $0x0101010101010101
DATA i8Ones<>+24(SB)/8, $0x0101010101010101
GLOBL i8Ones<>(SB), RODATA|NOPTR, $32

DATA i8Min<>+0(SB)/8, $0x8080808080808080
DATA i8Min<>+8(SB)/8, $0x8080808080808080
DATA i8Min<>+16(SB)/8, $0x8080808080808080
DATA i8Min<>+24(SB)/8, $0x8080808080808080
GLOBL i8Min<>(SB), RODATA|NOPTR, $32

// T4 transposes the dwords of four registers within each 128-bit lane:
// on return A holds dword 0 of A, B, C, D (in that order), B dword 1, C
// dword 2, D dword 3. Y8-Y11 are scratch.
#define T4(A, B, C, D) \
	VPUNPCKLDQ B, A, Y8; \
	VPUNPCKHDQ B, A, Y9; \
	VPUNPCKLDQ D, C, Y10; \
	VPUNPCKHDQ D, C, Y11; \
	VPUNPCKLQDQ Y10, Y8, A; \
	VPUNPCKHQDQ Y10, Y8, B; \
	VPUNPCKLQDQ Y11, Y9, C; \
	VPUNPCKHQDQ Y11, Y9, D

// XG stores X_g (in Y) and |X_g| and adds its pair sums into Y12.
#define XG(Y, OFF) \
	VMOVDQU Y, 64+OFF(DI); \
	VPABSB Y, Y8; \
	VMOVDQU Y8, 320+OFF(DI); \
	VPMADDUBSW Y, Y14, Y9; \
	VPADDW Y9, Y12, Y12

#define DX8(R, OFF) \
	MOVL (R), AX; \
	MOVL AX, OFF(DI)

// Register use in gemmQ8x8: Y0-Y3 the four rows' block sums (int32, then
// converted), Y4-Y7 their accumulators, Y8 int16 ones, Y9 |X_g|, Y10-Y13
// the broadcast weights, Y15 scales. SI row 0 of the current four,
// R12/R14/R15 the offsets of rows 1..3 from it (clamped to the last row,
// as in simd_quant_amd64.s), DX the current block of row 0, R8 the current
// interleaved block, CX blocks left, R13 rows left, DI the output, BX the
// prefetch pointer.

// RQ8 adds row block W's products with the eight tokens' group at XOFF
// into ACC; RQ8F sets ACC to them (the block's first group). The four
// weight bytes are broadcast with VBROADCASTSS: a pure load on Zen 3,
// where VPBROADCASTD also takes a vector pipe (measured ~10% slower).
#define RQ8(W, XOFF, T, ACC) \
	VBROADCASTSS W, T; \
	VPSIGNB 64+XOFF(R8), T, T; \
	VPMADDUBSW T, Y9, T; \
	VPMADDWD Y8, T, T; \
	VPADDD T, ACC, ACC

#define RQ8F(W, XOFF, T, ACC) \
	VBROADCASTSS W, T; \
	VPSIGNB 64+XOFF(R8), T, T; \
	VPMADDUBSW T, Y9, T; \
	VPMADDWD Y8, T, ACC

#define GROUP(WOFF, XOFF) \
	VMOVDQU 320+XOFF(R8), Y9; \
	RQ8(WOFF(DX), XOFF, Y10, Y0); \
	RQ8(WOFF(DX)(R12*1), XOFF, Y11, Y1); \
	RQ8(WOFF(DX)(R14*1), XOFF, Y12, Y2); \
	RQ8(WOFF(DX)(R15*1), XOFF, Y13, Y3)

// FMAROW adds d·S for one row: S (int32 in S) converted, times the row's
// scale (float16 at W) times the tokens' scales.
#define FMAROW(W, S, ACC) \
	VCVTDQ2PS S, S; \
	VPBROADCASTW W, X15; \
	VCVTPH2PS X15, Y15; \
	VMULPS (R8), Y15, Y15; \
	VFMADD231PS Y15, S, ACC

// func qInterleave8(dst unsafe.Pointer, toks *[8]unsafe.Pointer, nb int)
TEXT ·qInterleave8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ toks+8(FP), AX
	MOVQ 0(AX), R8
	MOVQ 8(AX), R9
	MOVQ 16(AX), R10
	MOVQ 24(AX), R11
	MOVQ 32(AX), R12
	MOVQ 40(AX), R13
	MOVQ 48(AX), R14
	MOVQ 56(AX), R15
	MOVQ nb+16(FP), CX
	VMOVDQU i8Ones<>(SB), Y14
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JZ qiDone

qiBlock:
	DX8(R8, 0)
	DX8(R9, 4)
	DX8(R10, 8)
	DX8(R11, 12)
	DX8(R12, 16)
	DX8(R13, 20)
	DX8(R14, 24)
	DX8(R15, 28)
	// Lane 0 of each register from tokens 0..3, lane 1 from 4..7.
	VMOVDQU 4(R8), X0
	VINSERTI128 $1, 4(R12), Y0, Y0
	VMOVDQU 4(R9), X1
	VINSERTI128 $1, 4(R13), Y1, Y1
	VMOVDQU 4(R10), X2
	VINSERTI128 $1, 4(R14), Y2, Y2
	VMOVDQU 4(R11), X3
	VINSERTI128 $1, 4(R15), Y3, Y3
	VMOVDQU 20(R8), X4
	VINSERTI128 $1, 20(R12), Y4, Y4
	VMOVDQU 20(R9), X5
	VINSERTI128 $1, 20(R13), Y5, Y5
	VMOVDQU 20(R10), X6
	VINSERTI128 $1, 20(R14), Y6, Y6
	VMOVDQU 20(R11), X7
	VINSERTI128 $1, 20(R15), Y7, Y7
	T4(Y0, Y1, Y2, Y3)
	T4(Y4, Y5, Y6, Y7)
	VPXOR Y12, Y12, Y12
	XG(Y0, 0)
	XG(Y1, 32)
	XG(Y2, 64)
	XG(Y3, 96)
	XG(Y4, 128)
	XG(Y5, 160)
	XG(Y6, 192)
	XG(Y7, 224)
	VPMADDWD Y15, Y12, Y12
	VPSLLD $3, Y12, Y12
	VMOVDQU Y12, 32(DI)
	ADDQ $36, R8
	ADDQ $36, R9
	ADDQ $36, R10
	ADDQ $36, R11
	ADDQ $36, R12
	ADDQ $36, R13
	ADDQ $36, R14
	ADDQ $36, R15
	ADDQ $576, DI
	DECQ CX
	JNZ qiBlock

qiDone:
	VZEROUPPER
	RET

// func gemmQ8x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ8x8(SB), NOSPLIT, $128-64
	MOVQ w+0(FP), SI
	MOVQ rows+16(FP), R13
	MOVQ out+40(FP), DI
	MOVL $0x00010001, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8
	TESTQ R13, R13
	JLE g8Done

g8Group:
	ROWOFFS
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), BX
	MOVQ xi+24(FP), R8
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ SI, DX
	MOVQ nb+32(FP), CX
	TESTQ CX, CX
	JZ g8Store

	PCALIGN $32
g8Block:
	VMOVDQU 320(R8), Y9
	RQ8F(2(DX), 0, Y10, Y0)
	RQ8F(2(DX)(R12*1), 0, Y11, Y1)
	RQ8F(2(DX)(R14*1), 0, Y12, Y2)
	RQ8F(2(DX)(R15*1), 0, Y13, Y3)
	GROUP(6, 32)
	GROUP(10, 64)
	GROUP(14, 96)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	PREFETCHT0 128(BX)
	ADDQ $136, BX
	GROUP(18, 128)
	GROUP(22, 160)
	GROUP(26, 192)
	GROUP(30, 224)
	FMAROW((DX), Y0, Y4)
	FMAROW((DX)(R12*1), Y1, Y5)
	FMAROW((DX)(R14*1), Y2, Y6)
	FMAROW((DX)(R15*1), Y3, Y7)
	ADDQ $34, DX
	ADDQ $576, R8
	DECQ CX
	JNZ g8Block

g8Store:
	// Spill the four rows' eight tokens and store the ntok real tokens
	// of the (up to four) real rows.
	VMOVUPS Y4, 0(SP)
	VMOVUPS Y5, 32(SP)
	VMOVUPS Y6, 64(SP)
	VMOVUPS Y7, 96(SP)
	G8_WRITE(g8Group, g8Done, g8Rows, g8Row, g8Tok, 0, 32, ntok+56, ostride+48)

g8Done:
	VZEROUPPER
	RET

// func q8HasMin(p unsafe.Pointer, blocks int) bool reports whether any of
// the Q8_0 blocks at p holds a weight of -128.
TEXT ·q8HasMin(SB), NOSPLIT, $0-17
	MOVQ p+0(FP), SI
	MOVQ blocks+8(FP), CX
	VMOVDQU i8Min<>(SB), Y1
	VPXOR Y2, Y2, Y2
	TESTQ CX, CX
	JZ hmDone

	CMPQ CX, $4
	JLT hmTail
	VPXOR Y3, Y3, Y3

hmLoop4:
	VPCMPEQB 2(SI), Y1, Y0
	VPCMPEQB 36(SI), Y1, Y4
	VPCMPEQB 70(SI), Y1, Y5
	VPCMPEQB 104(SI), Y1, Y6
	VPOR Y0, Y2, Y2
	VPOR Y4, Y3, Y3
	VPOR Y5, Y2, Y2
	VPOR Y6, Y3, Y3
	ADDQ $136, SI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE hmLoop4
	VPOR Y3, Y2, Y2
	TESTQ CX, CX
	JZ hmDone

hmTail:
	VPCMPEQB 2(SI), Y1, Y0
	VPOR Y0, Y2, Y2
	ADDQ $34, SI
	DECQ CX
	JNZ hmTail

hmDone:
	VPTEST Y2, Y2
	SETNE ret+16(FP)
	VZEROUPPER
	RET
