//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ4Kx8 on AVX-512 VNNI: the same frame, records and float steps as
// gemm_kquant_amd64.s's kernel, with each group's VPMADDUBSW and VPADDW
// (and the block's VPMADDWD against ones) folded into one VPDPBUSD per
// row. The quants (0..15) are VPDPBUSD's unsigned operand and X_g its
// signed one, so, as in the AVX2 kernel, nothing is flipped or corrected.
// The AVX2 kernel's int16 pair sums never saturate (a block's eight
// groups add to at most 30720), so both form the same exact int32 S of
// each block; the sub-block scale then applies in float exactly as there
// (A = sc·S, an exact product below 2^24), so the bits are the same.
//
// VPDPBUSD's latency is several cycles, so each row sums its even groups
// in Y0-Y3 and its odd ones in Y16-Y19: eight chains in flight.
//
// Registers: Y0-Y3 and Y16-Y19 the rows' block sums, Y4-Y7 their float
// accumulators, Y9 X_g (then dx), Y10-Y13 the broadcast quants (then
// scratch), Y14 the tokens' cvt(8·Σx), Y15 scratch, Y20-Y23 d and Y24-Y27
// dmin of rows 0..3 broadcast once a superblock (gemmQ4Kx8 loads them
// once a block). General registers as gemmQ4Kx8's.

#define G4V_EVEN(XO, WO) \
	G8V_G(XO, WO, Y0, Y1, Y2, Y3)

#define G4V_ODD(XO, WO) \
	G8V_G(XO, WO, Y16, Y17, Y18, Y19)

// G4V_ROW adds row R's block into ACC, as G4K_ROW from the int32 sums S
// and S2: D and DM the row's d and dmin broadcast, T scratch, Y9 the
// tokens' dx, Y14 their cvt(8·Σx).
#define G4V_ROW(S, S2, D, DM, T, ACC, R) \
	VPADDD S2, S, S; \
	VCVTDQ2PS S, S; \
	VBROADCASTSS 128+4*R(R9), T; \
	VMULPS T, S, S; \
	VMULPS Y9, D, T; \
	VFMADD231PS T, S, ACC; \
	VBROADCASTSS 144+4*R(R9), T; \
	VMULPS Y14, T, S; \
	VMULPS Y9, DM, T; \
	VFNMADD231PS T, S, ACC

// func gemmQ4Kx8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ4Kx8VNNI(SB), 0, $1376-64
	GK_ENTRY(g4vDone)

g4vGroup:
	GK_GROUP(g4vStore)

g4vSuper:
	G4K_SUPER
	VBROADCASTSS 64(SP), Y20
	VBROADCASTSS 68(SP), Y21
	VBROADCASTSS 72(SP), Y22
	VBROADCASTSS 76(SP), Y23
	VBROADCASTSS 80(SP), Y24
	VBROADCASTSS 84(SP), Y25
	VBROADCASTSS 88(SP), Y26
	VBROADCASTSS 92(SP), Y27
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g4vBlock:
	VPXORD Y0, Y0, Y0
	VPXORD Y1, Y1, Y1
	VPXORD Y2, Y2, Y2
	VPXORD Y3, Y3, Y3
	VPXORD Y16, Y16, Y16
	VPXORD Y17, Y17, Y17
	VPXORD Y18, Y18, Y18
	VPXORD Y19, Y19, Y19
	G4V_EVEN(64, 0)
	G4V_ODD(96, 4)
	G4V_EVEN(128, 8)
	G4V_ODD(160, 12)
	G4V_EVEN(192, 16)
	G4V_ODD(224, 20)
	G4V_EVEN(256, 24)
	G4V_ODD(288, 28)
	VMOVUPS (R8), Y9
	VCVTDQ2PS 32(R8), Y14
	G4V_ROW(Y0, Y16, Y20, Y24, Y10, Y4, 0)
	G4V_ROW(Y1, Y17, Y21, Y25, Y11, Y5, 1)
	G4V_ROW(Y2, Y18, Y22, Y26, Y12, Y6, 2)
	G4V_ROW(Y3, Y19, Y23, Y27, Y13, Y7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	DECQ R10
	JNZ g4vBlock
	ADDQ $144, DX
	DECQ CX
	JNZ g4vSuper

g4vStore:
	GK_STORE(g4vGroup, g4vDone, g4vRows, g4vRow, g4vTok)

g4vDone:
	VZEROUPPER
	RET
