//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ5Kx8: gemmQ4Kx8 (gemm_kquant_amd64.s, whose comment gives the
// frame, the interleaved activations and the registers) for Q5_K weights.
// A Q5_K header's first 16 bytes are a Q4_K header's, so Q4K_HEAD and the
// same sc, m records serve; the quants sit at 48 (not 16) and gain bit k
// of qh byte e (qh at 16) as their fifth bit for activation block k,
// element e, as dotQ5KGo reads them. The records hold the whole 0..31
// quants, so the block loop's byte products need no unpacking.
//
// What changes in the loop: a pair of q·x is now at most 2·31·128 = 7936,
// so only four groups add in int16 (at most 31744) before VPMADDWD, and
// the two halves of a block add as dwords. Groups 0..3 go as in Q4_K
// (one X_g load, four rows); groups 4..7 run two rows at a time, since
// four more int16 sums do not fit in the registers. A = sc·S stays exact
// (|A| ≤ 63·32·31·128 < 2^23), B is Q4_K's, and the float operations per
// (row, token) are order.go's, as for Q4_K. The macros are gemmQ4Kx8's
// under G5K_ names; the quants' unpacking and the prefetch (G5K_Q,
// G5K_PF, gemm_kquant_amd64.h) are shared with gemmQ5Kx16VNNI.

DATA g5kEighth<>+0(SB)/8, $0x3e0000003e000000
DATA g5kEighth<>+8(SB)/8, $0x3e0000003e000000
DATA g5kEighth<>+16(SB)/8, $0x3e0000003e000000
DATA g5kEighth<>+24(SB)/8, $0x3e0000003e000000
GLOBL g5kEighth<>(SB), RODATA|NOPTR, $32

// G5K_SC converts sc and m of blocks J and J+1 (at SO(SP), SO+32(SP)) to
// float32 (m divided by 8) in records A and B (frame offsets).
#define G5K_SC(SO, A, B) \
	VPMOVZXBD SO(SP), Y10; \
	VCVTDQ2PS Y10, Y10; \
	VMOVUPS X10, A+128(SP); \
	VEXTRACTF128 $1, Y10, B+128(SP); \
	VPMOVZXBD SO+32(SP), Y11; \
	VCVTDQ2PS Y11, Y11; \
	VMULPS g5kEighth<>(SB), Y11, Y11; \
	VMOVUPS X11, A+144(SP); \
	VEXTRACTF128 $1, Y11, B+144(SP)

// G5K_G adds group G (X_g at XO, quant bytes at WO) of rows P and Q to
// their int16 sums in Y10 and Y11.
#define G5K_G(P, Q, XO, WO) \
	VMOVDQU XO(R8), Y9; \
	VBROADCASTSS WO+32*P(R9), Y12; \
	VBROADCASTSS WO+32*Q(R9), Y13; \
	VPMADDUBSW Y9, Y12, Y12; \
	VPMADDUBSW Y9, Y13, Y13; \
	VPADDW Y12, Y10, Y10; \
	VPADDW Y13, Y11, Y11

// G5K_PAIR adds groups 4..7 of rows P and Q to their dword sums S0, S1.
#define G5K_PAIR(P, Q, S0, S1) \
	VMOVDQU 192(R8), Y9; \
	VBROADCASTSS 16+32*P(R9), Y10; \
	VBROADCASTSS 16+32*Q(R9), Y11; \
	VPMADDUBSW Y9, Y10, Y10; \
	VPMADDUBSW Y9, Y11, Y11; \
	G5K_G(P, Q, 224, 20); \
	G5K_G(P, Q, 256, 24); \
	G5K_G(P, Q, 288, 28); \
	VPMADDWD Y8, Y10, Y10; \
	VPMADDWD Y8, Y11, Y11; \
	VPADDD Y10, S0, S0; \
	VPADDD Y11, S1, S1

// G5K_ROW adds row R's block into ACC: S the dword sums, T scratch, Y9
// the tokens' dx, Y14 their cvt(8·Σx).
#define G5K_ROW(S, T, ACC, R) \
	VCVTDQ2PS S, S; \
	VBROADCASTSS 128+4*R(R9), T; \
	VMULPS T, S, S; \
	VBROADCASTSS 64+4*R(SP), T; \
	VMULPS Y9, T, T; \
	VFMADD231PS T, S, ACC; \
	VBROADCASTSS 144+4*R(R9), T; \
	VMULPS Y14, T, S; \
	VBROADCASTSS 80+4*R(SP), T; \
	VMULPS Y9, T, T; \
	VFNMADD231PS T, S, ACC

// func gemmQ5Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// is gemmQ4Kx8 for Q5_K weights.
TEXT ·gemmQ5Kx8(SB), 0, $1376-64
	GK_ENTRY(g5kDone)

g5kGroup:
	GK_GROUP(g5kStore)

g5kSuper:
	Q4K_HEAD(k4nib<>(SB))
	G5K_SC(0, 96, 256)
	G5K_SC(8, 416, 576)
	G5K_SC(16, 736, 896)
	G5K_SC(24, 1056, 1216)
	VMOVDQU k4nib<>(SB), Y15
	VMOVDQU g5kx10<>(SB), Y14
	XORQ AX, AX
	G5K_Q(AX, 0)
	G5K_Q(R12, 32)
	G5K_Q(R14, 64)
	G5K_Q(R15, 96)
	G5K_PF
	ADDQ $704, BX
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g5kBlock:
	GQ_FIRST
	GQ_NEXT(96, 4)
	GQ_NEXT(128, 8)
	GQ_NEXT(160, 12)
	VPMADDWD Y8, Y0, Y0
	VPMADDWD Y8, Y1, Y1
	VPMADDWD Y8, Y2, Y2
	VPMADDWD Y8, Y3, Y3
	G5K_PAIR(0, 1, Y0, Y1)
	G5K_PAIR(2, 3, Y2, Y3)
	VMOVUPS (R8), Y9
	VCVTDQ2PS 32(R8), Y14
	G5K_ROW(Y0, Y10, Y4, 0)
	G5K_ROW(Y1, Y11, Y5, 1)
	G5K_ROW(Y2, Y12, Y6, 2)
	G5K_ROW(Y3, Y13, Y7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	DECQ R10
	JNZ g5kBlock
	ADDQ $176, DX
	DECQ CX
	JNZ g5kSuper

g5kStore:
	GK_STORE(g5kGroup, g5kDone, g5kRows, g5kRow, g5kTok)

g5kDone:
	VZEROUPPER
	RET
