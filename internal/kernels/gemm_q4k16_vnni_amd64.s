//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ4Kx8VNNI for sixteen tokens, two interleaved groups of eight (xa
// and xb, qInterleave8's layout), in 512-bit registers: the superblock
// unpacking (G4K_SUPER, the frame's records) is done once per group of
// four rows for all sixteen tokens, and each broadcast of a row's quants
// serves 64 multiply-adds instead of 32. A 512-bit op runs as two 256-bit
// halves on a Zen 4, so the multiplies cost the same as two eight-token
// calls; what is saved is loads, the unpacking and per-block overhead.
// (On Intel parts with AVX-512, which hasVNNI selects too, 512-bit code
// may lower the clock; that is unmeasured.)
//
// The quants stay VPDPBUSD's unsigned operand, broadcast into a register
// by VPBROADCASTD (the instruction's embedded broadcast is of its signed
// operand, which would need the activations flipped and corrected). The
// integer sums and the float steps per (row, block, token) are
// gemmQ4Kx8VNNI's, on sixteen lanes, so the bits are gemmQ4Kx8's.
//
// Registers (zmm): Z0-Z3 and Z16-Z19 the rows' even and odd block sums,
// Z4-Z7 their float accumulators (tokens 0..15 of rows 0..3), Z9 X_g
// (then dx), Z10-Z13 the broadcast quants (then scratch), Z14 the tokens'
// cvt(8·Σx), Z20-Z23 d and Z24-Z27 dmin of rows 0..3. General: as
// gemmQ4Kx8VNNI's, with R8 group A's current block and R11 group B's.

// G16_G multiplies group g of the sixteen tokens (X_g at XO in both
// groups' blocks) by the four rows' quants of the group (at WO in the
// record) into A0-A3.
#define G16_G(XO, WO, A0, A1, A2, A3) \
	VMOVDQU XO(R8), Y9; \
	VINSERTI64X4 $1, XO(R11), Z9, Z9; \
	VPBROADCASTD WO(R9), Z10; \
	VPBROADCASTD WO+32(R9), Z11; \
	VPBROADCASTD WO+64(R9), Z12; \
	VPBROADCASTD WO+96(R9), Z13; \
	VPDPBUSD Z9, Z10, A0; \
	VPDPBUSD Z9, Z11, A1; \
	VPDPBUSD Z9, Z12, A2; \
	VPDPBUSD Z9, Z13, A3

#define G16_EVEN(XO, WO) \
	G16_G(XO, WO, Z0, Z1, Z2, Z3)

#define G16_ODD(XO, WO) \
	G16_G(XO, WO, Z16, Z17, Z18, Z19)

// G16_ROW is G4V_ROW on sixteen tokens: row R's block into ACC from the
// int32 sums S and S2, D and DM the row's d and dmin broadcast, T
// scratch, Z9 the tokens' dx, Z14 their cvt(8·Σx).
#define G16_ROW(S, S2, D, DM, T, ACC, R) \
	VPADDD S2, S, S; \
	VCVTDQ2PS S, S; \
	VBROADCASTSS 128+4*R(R9), T; \
	VMULPS T, S, S; \
	VMULPS Z9, D, T; \
	VFMADD231PS T, S, ACC; \
	VBROADCASTSS 144+4*R(R9), T; \
	VMULPS Z14, T, S; \
	VMULPS Z9, DM, T; \
	VFNMADD231PS T, S, ACC

// G16_NOCONST is QENTRY's CONST here: the kernel needs no constants.
#define G16_NOCONST

// func gemmQ4Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ4Kx16VNNI(SB), 0, $1376-72
	QENTRY(out+48, G16_NOCONST, done)

group:
	QROWS(xa)
	MOVQ xb+32(FP), R11
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ SI, DX
	MOVQ nb+40(FP), CX
	SHRQ $3, CX
	JZ store

super:
	G4K_SUPER
	VBROADCASTSS 64(SP), Z20
	VBROADCASTSS 68(SP), Z21
	VBROADCASTSS 72(SP), Z22
	VBROADCASTSS 76(SP), Z23
	VBROADCASTSS 80(SP), Z24
	VBROADCASTSS 84(SP), Z25
	VBROADCASTSS 88(SP), Z26
	VBROADCASTSS 92(SP), Z27
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
block:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	G16_EVEN(64, 0)
	G16_ODD(96, 4)
	G16_EVEN(128, 8)
	G16_ODD(160, 12)
	G16_EVEN(192, 16)
	G16_ODD(224, 20)
	G16_EVEN(256, 24)
	G16_ODD(288, 28)
	VMOVUPS (R8), Y9
	VINSERTF64X4 $1, (R11), Z9, Z9
	VMOVDQU 32(R8), Y14
	VINSERTI64X4 $1, 32(R11), Z14, Z14
	VCVTDQ2PS Z14, Z14
	G16_ROW(Z0, Z16, Z20, Z24, Z10, Z4, 0)
	G16_ROW(Z1, Z17, Z21, Z25, Z11, Z5, 1)
	G16_ROW(Z2, Z18, Z22, Z26, Z12, Z6, 2)
	G16_ROW(Z3, Z19, Z23, Z27, Z13, Z7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	ADDQ $576, R11
	DECQ R10
	JNZ block
	ADDQ $144, DX
	DECQ CX
	JNZ super

store:
	// Spill the four rows' sixteen tokens over the records and write
	// the ntok real tokens of the (up to four) real rows.
	VMOVUPS Z4, 96(SP)
	VMOVUPS Z5, 160(SP)
	VMOVUPS Z6, 224(SP)
	VMOVUPS Z7, 288(SP)
	G8_WRITE(group, done, rows4, row, tok, 96, 64, ntok+64, ostride+56)

done:
	VZEROUPPER
	RET
