//go:build amd64 && !purego

#include "textflag.h"

// The arithmetic ceilings that perf times (peak.go). Each round is the
// innermost sequence of a batched kernel, four weight rows against one
// group of tokens, with the same instructions and the same kinds of
// operands, but reading a few L1-resident bytes instead of a matrix: so
// no kernel made of these instructions can multiply faster.

DATA peakData<>+0(SB)/8, $0x0102030405060708
DATA peakData<>+8(SB)/8, $0xf1f2f3f4f5f6f7f8
DATA peakData<>+16(SB)/8, $0x0102030405060708
DATA peakData<>+24(SB)/8, $0xf1f2f3f4f5f6f7f8
DATA peakData<>+32(SB)/8, $0x3f8000003f800000
DATA peakData<>+40(SB)/8, $0x3f8000003f800000
DATA peakData<>+48(SB)/8, $0x3f8000003f800000
DATA peakData<>+56(SB)/8, $0x3f8000003f800000
GLOBL peakData<>(SB), RODATA|NOPTR, $64

// Q8 is gemm_q8_amd64.s's RQ8 for one row: broadcast four weights, sign
// them by the tokens' values, multiply with their magnitudes, widen the
// pair sums and add them up: 32 multiply-adds.
#define Q8(WOFF, T, ACC) \
	VBROADCASTSS WOFF(SI), T; \
	VPSIGNB (SI), T, T; \
	VPMADDUBSW T, Y9, T; \
	VPMADDWD Y8, T, T; \
	VPADDD T, ACC, ACC

// Q8GROUP is GROUP's four rows against one group of tokens.
#define Q8GROUP(WOFF) \
	Q8(WOFF, Y10, Y0); \
	Q8(WOFF+4, Y11, Y1); \
	Q8(WOFF+8, Y12, Y2); \
	Q8(WOFF+12, Y13, Y3)

// func peakQ8Loop(rounds int)
//
// 16·32 = 512 multiply-adds of int8 values a round: four groups of
// GROUP's four rows, each row four weights by eight tokens.
TEXT ·peakQ8Loop(SB), NOSPLIT, $0-8
	MOVQ rounds+0(FP), CX
	LEAQ peakData<>(SB), SI
	VMOVDQU (SI), Y9
	VMOVDQU (SI), Y8
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ CX, CX
	JLE q8pDone

	PCALIGN $32
q8pLoop:
	Q8GROUP(0)
	Q8GROUP(16)
	Q8GROUP(0)
	Q8GROUP(16)
	DECQ CX
	JNZ q8pLoop

q8pDone:
	VZEROUPPER
	RET

// F32 loads one vector of weights and multiplies it with four
// registers of activations into four accumulators: eight multiply-adds an
// FMA, one load per four of them, as a register tile of the float kernels.
#define F32(WOFF, A, B, C, D) \
	VMOVUPS WOFF(SI), Y15; \
	VFMADD231PS Y15, Y8, A; \
	VFMADD231PS Y15, Y9, B; \
	VFMADD231PS Y15, Y10, C; \
	VFMADD231PS Y15, Y11, D

// func peakF32Loop(rounds int)
//
// 16·8 = 128 multiply-adds of float32 values a round, over eight
// independent accumulators, so that the FMA latency hides behind them.
TEXT ·peakF32Loop(SB), NOSPLIT, $0-8
	MOVQ rounds+0(FP), CX
	LEAQ peakData<>(SB), SI
	VMOVUPS 32(SI), Y8
	VMOVUPS 32(SI), Y9
	VMOVUPS 32(SI), Y10
	VMOVUPS 32(SI), Y11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JLE f32pDone

	PCALIGN $32
f32pLoop:
	F32(0, Y0, Y1, Y2, Y3)
	F32(32, Y4, Y5, Y6, Y7)
	F32(0, Y0, Y1, Y2, Y3)
	F32(32, Y4, Y5, Y6, Y7)
	DECQ CX
	JNZ f32pLoop

f32pDone:
	VZEROUPPER
	RET

// Q8V is gemm_q8vnni_amd64.s's step of the sixteen-token kernel for one
// row: four weight bytes broadcast by the instruction itself against
// sixteen tokens' values, 64 multiply-adds.
#define Q8V(WOFF, ACC) \
	VPDPBUSD.BCST WOFF(SI), Z9, ACC

// func peakQ8VNNILoop(rounds int)
//
// 512 multiply-adds a round, as peakQ8Loop's, over eight accumulators as
// gemmQ8x16VNNI keeps them (VPDPBUSD's latency would bind four).
TEXT ·peakQ8VNNILoop(SB), NOSPLIT, $0-8
	MOVQ rounds+0(FP), CX
	LEAQ peakData<>(SB), SI
	VBROADCASTI64X4 (SI), Z9
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	TESTQ CX, CX
	JLE q8vDone

	PCALIGN $32
q8vLoop:
	Q8V(0, Z0)
	Q8V(4, Z1)
	Q8V(8, Z2)
	Q8V(12, Z3)
	Q8V(16, Z16)
	Q8V(20, Z17)
	Q8V(24, Z18)
	Q8V(28, Z19)
	DECQ CX
	JNZ q8vLoop

q8vDone:
	VZEROUPPER
	RET
