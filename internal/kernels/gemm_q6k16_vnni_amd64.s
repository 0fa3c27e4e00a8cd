//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ6Kx8 for sixteen tokens on AVX-512 VNNI, two interleaved groups of
// eight (xa and xb) in 512-bit registers: the superblock unpacking into
// the frame's records is gemmQ6Kx8's, done once per group of four rows
// for all sixteen tokens, and each broadcast of a row's quants serves 64
// multiply-adds. As for gemmQ4Kx16VNNI, a 512-bit op is two 256-bit
// halves on a Zen 4: what is saved is loads, the unpacking and the
// per-block overhead, and VPDPBUSD folds each group's VPMADDUBSW, VPADDW
// and VPMADDWD into one op.
//
// Exactness: the quants (0..63) are VPDPBUSD's unsigned operand and X_g
// its signed one, so the dword sums S0 and S1 of a block's two sub-blocks
// are the exact Σq·x, as gemmQ6Kx8's int16 pair sums (never saturating)
// give them. The offset is taken off as there, as the integer 32·Σx of
// each sub-block: the first's from X_g against bytes of 32 (VPDPBUSD,
// exact), the second's as 4·(8·Σx of the block, which qInterleave8 wrote
// from the same bytes) less the first's. So Σ(q−32)·x is the same int32,
// and the float steps per (row, block, token) are gemmQ6Kx8's, on
// sixteen lanes: S = fma(s1, cvt(S1), s0·cvt(S0)), acc = fma(d·dx, S,
// acc). The bits are those of gemmQ6Kx8 on each group.
//
// Registers (zmm): Z0-Z3 and Z16-Z19 the rows' first and second sub-block
// sums, Z4-Z7 their float accumulators (tokens 0..15 of rows 0..3), Z8
// bytes of 32, Z9 X_g, Z10-Z13 the broadcast quants, Z14 and Z15 32·Σx of
// the two sub-blocks, Z20-Z23 d of rows 0..3, Z24 dx, Z25-Z28 scratch.
// General registers as gemmQ6Kx8's, with R11 group B's current block.

// The superblock unpacking is gemmQ6Kx8's (G6K_SUPER of
// gemm_kquant_amd64.h): the same records, d at 64(SP).

// Q6V_G0 is G16_G for a group of the first sub-block, which also adds
// 32·X_g's sums to Z14.
#define Q6V_G0(XO, WO) \
	G16_G(XO, WO, Z0, Z1, Z2, Z3); \
	VPDPBUSD Z9, Z8, Z14

#define Q6V_G1(XO, WO) \
	G16_G(XO, WO, Z16, Z17, Z18, Z19)

// Q6V_ROW adds row R's block into ACC, as G6K_ROW: S0 and S1 its two
// sub-blocks' sums of q·x, D its d broadcast, T scratch, Z24 the tokens'
// dx. The scales are broadcast from the record by the multiplies.
#define Q6V_ROW(S0, S1, D, T, ACC, R) \
	Q6_ROWIN(S0, S1, D, T, ACC, R, Z14, Z15, Z24)

// Q6_ROWIN is Q6V_ROW with the first and second sub-blocks' 32·Σx in C0
// and C1 and the tokens' dx in DXS: zmm for sixteen tokens, ymm for
// eight.
#define Q6_ROWIN(S0, S1, D, T, ACC, R, C0, C1, DXS) \
	VPSUBD C0, S0, S0; \
	VPSUBD C1, S1, S1; \
	VCVTDQ2PS S0, S0; \
	VCVTDQ2PS S1, S1; \
	VMULPS.BCST 128+4*R(R9), S0, S0; \
	VFMADD231PS.BCST 144+4*R(R9), S1, S0; \
	VMULPS DXS, D, T; \
	VFMADD231PS T, S0, ACC

// Q6V_CONST is QENTRY's CONST: Z8's bytes of 32.
#define Q6V_CONST \
	VPBROADCASTD k6x20<>(SB), Z8

// func gemmQ6Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ6Kx16VNNI(SB), 0, $1376-72
	QENTRY(out+48, Q6V_CONST, q6vDone)

q6vGroup:
	G16_OPEN
	SHRQ $3, CX
	JZ q6vStore

q6vSuper:
	G6K_SUPER
	VBROADCASTSS 64(SP), Z20
	VBROADCASTSS 68(SP), Z21
	VBROADCASTSS 72(SP), Z22
	VBROADCASTSS 76(SP), Z23
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
q6vBlock:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z14, Z14, Z14
	Q6V_G0(64, 0)
	Q6V_G1(192, 16)
	Q6V_G0(96, 4)
	Q6V_G1(224, 20)
	Q6V_G0(128, 8)
	Q6V_G1(256, 24)
	Q6V_G0(160, 12)
	Q6V_G1(288, 28)
	// 32·Σx of the second sub-block: 4·(8·Σx of the block) less the
	// first's.
	VMOVDQU 32(R8), Y15
	VINSERTI64X4 $1, 32(R11), Z15, Z15
	VPSLLD $2, Z15, Z15
	VPSUBD Z14, Z15, Z15
	VMOVUPS (R8), Y24
	VINSERTF64X4 $1, (R11), Z24, Z24
	Q6V_ROW(Z0, Z16, Z20, Z25, Z4, 0)
	Q6V_ROW(Z1, Z17, Z21, Z26, Z5, 1)
	Q6V_ROW(Z2, Z18, Z22, Z27, Z6, 2)
	Q6V_ROW(Z3, Z19, Z23, Z28, Z7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	ADDQ $576, R11
	DECQ R10
	JNZ q6vBlock
	ADDQ $210, DX
	DECQ CX
	JNZ q6vSuper

q6vStore:
	// Spill the four rows' sixteen tokens over the records and write
	// the ntok real tokens of the (up to four) real rows.
	G16_STORE(q6vGroup, q6vDone, q6vRows, q6vRow, q6vTok)

q6vDone:
	VZEROUPPER
	RET

// gemmQ6Kx8VNNI is gemmQ6Kx16VNNI for one group of eight tokens, in
// 256-bit registers (the same registers' low halves, Y24 dx): the VNNI
// twin of gemmQ6Kx8 for a group left over from the pairs, with the same
// frame, unpacking, exact integers and float steps, so the same bits.

// Q6W_G0 and Q6W_G1 are Q6V_G0 and Q6V_G1 for the eight tokens at
// XO(R8).
#define Q6W_G0(XO, WO) \
	G8V_G(XO, WO, Y0, Y1, Y2, Y3); \
	VPDPBUSD Y9, Y8, Y14

#define Q6W_G1(XO, WO) \
	G8V_G(XO, WO, Y16, Y17, Y18, Y19)

// Q6W_ROW is Q6V_ROW on eight tokens.
#define Q6W_ROW(S0, S1, D, T, ACC, R) \
	Q6_ROWIN(S0, S1, D, T, ACC, R, Y14, Y15, Y24)

// func gemmQ6Kx8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ6Kx8VNNI(SB), 0, $1376-64
	QENTRY(out+40, Q6V_CONST, q6wDone)

q6wGroup:
	GK_GROUP(q6wStore)

q6wSuper:
	G6K_SUPER
	VBROADCASTSS 64(SP), Y20
	VBROADCASTSS 68(SP), Y21
	VBROADCASTSS 72(SP), Y22
	VBROADCASTSS 76(SP), Y23
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
q6wBlock:
	VPXORD Y0, Y0, Y0
	VPXORD Y1, Y1, Y1
	VPXORD Y2, Y2, Y2
	VPXORD Y3, Y3, Y3
	VPXORD Y16, Y16, Y16
	VPXORD Y17, Y17, Y17
	VPXORD Y18, Y18, Y18
	VPXORD Y19, Y19, Y19
	VPXORD Y14, Y14, Y14
	Q6W_G0(64, 0)
	Q6W_G1(192, 16)
	Q6W_G0(96, 4)
	Q6W_G1(224, 20)
	Q6W_G0(128, 8)
	Q6W_G1(256, 24)
	Q6W_G0(160, 12)
	Q6W_G1(288, 28)
	VMOVDQU 32(R8), Y15
	VPSLLD $2, Y15, Y15
	VPSUBD Y14, Y15, Y15
	VMOVUPS (R8), Y24
	Q6W_ROW(Y0, Y16, Y20, Y25, Y4, 0)
	Q6W_ROW(Y1, Y17, Y21, Y26, Y5, 1)
	Q6W_ROW(Y2, Y18, Y22, Y27, Y6, 2)
	Q6W_ROW(Y3, Y19, Y23, Y28, Y7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	DECQ R10
	JNZ q6wBlock
	ADDQ $210, DX
	DECQ CX
	JNZ q6wSuper

q6wStore:
	GK_STORE(q6wGroup, q6wDone, q6wRows, q6wRow, q6wTok)

q6wDone:
	VZEROUPPER
	RET
