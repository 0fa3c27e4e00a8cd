//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_legacy_amd64.h"
#include "gemm_kquant_amd64.h"
#include "gemm_legacy_amd64.h"

// The legacy types' batched kernels on AVX-512 VNNI. One VPDPBUSD per row
// and group (G8V_G, G16_G) takes the place of the AVX2 kernels' pair sums
// (GL_SUM4, GL_SUM5): the quants are unsigned bytes and the activations
// signed, as the instruction takes them, and it adds the four products of
// a dword into int32 lanes, so A = Σq·x is exact without int16 pair sums,
// the spill of the five-bit types' halves or the widening to int32.
// Scales, the Σx terms and the float steps are GL_FIN*'s: the bits are
// the AVX2 kernels'.
//
// Eight tokens: only the five-bit types have a VNNI kernel (GL_KERNEL
// with GL_VSUM), 1.05-1.15x the AVX2 one (BenchmarkGemmLegacyVNNI). For
// Q4_0 and Q4_1 the same measured 1.0x: with nothing to spill, the
// unpacking and the float steps around the sums weigh as much as the
// sums. Sixteen tokens (below) unpack once for both groups and gain for
// all four types.

// GL_VSUM leaves the four rows' A (int32) in Y0-Y3.
#define GL_VSUM \
	VPXOR Y0, Y0, Y0; \
	VPXOR Y1, Y1, Y1; \
	VPXOR Y2, Y2, Y2; \
	VPXOR Y3, Y3, Y3; \
	GL_GROUPS(G8V_G, Y0, Y1, Y2, Y3)

// The sixteen-token kernels: two interleaved groups of eight tokens (xa
// and xb) in 512-bit registers, as gemmQ4Kx16VNNI runs Q4_K's. Each block
// of four rows is unpacked into the record once for all sixteen tokens,
// and each broadcast of a row's group serves 64 multiply-adds instead of
// 32 (G16_G). The float steps are GL_FIN*'s on sixteen lanes, so each
// token's bits are the eight-token kernels'.
//
// Registers (zmm): Z0-Z3 the rows' A, Z4-Z7 their float accumulators
// (tokens 0..15 of rows 0..3), Z9 X_g (then the tokens' dx), Z10-Z13 the
// broadcast quants (then scratch), Z14 the tokens' Σx term. General: as
// the eight-token kernels', with R8 group A's current block and R11 group
// B's.

// GL16_DX loads the sixteen tokens' dx into Z9 and their 8·Σx into Z14.
#define GL16_DX \
	VMOVUPS (R8), Y9; \
	VINSERTF64X4 $1, (R11), Z9, Z9; \
	VMOVDQU 32(R8), Y14; \
	VINSERTI64X4 $1, 32(R11), Z14, Z14

// GL16_ROWD, GL16_ROW0 and GL16_ROWM are GL_ROWD, GL_ROW0 and GL_ROWM on
// sixteen tokens.
#define GL16_ROWD(S, T, ACC, R) \
	VBROADCASTSS 128+4*R(SP), T; \
	VMULPS Z9, T, T; \
	VFMADD231PS T, S, ACC

#define GL16_ROW0(S, T, ACC, R) \
	VPSUBD Z14, S, S; \
	VCVTDQ2PS S, S; \
	GL16_ROWD(S, T, ACC, R)

#define GL16_ROWM(S, T, ACC, R) \
	VCVTDQ2PS S, S; \
	GL16_ROWD(S, T, ACC, R); \
	VBROADCASTSS 144+4*R(SP), T; \
	VMULPS Z9, T, T; \
	VFMADD231PS T, Z14, ACC

// GL16_FIN40, GL16_FIN0 and GL16_FINM are GL_FIN40, GL_FIN0 and GL_FINM
// on sixteen tokens (after GL16_DX).
#define GL16_FIN40 \
	GL16_ROW0(Z0, Z10, Z4, 0); \
	GL16_ROW0(Z1, Z11, Z5, 1); \
	GL16_ROW0(Z2, Z12, Z6, 2); \
	GL16_ROW0(Z3, Z13, Z7, 3)

#define GL16_FIN0 \
	VPSLLD $1, Z14, Z14; \
	GL16_FIN40

#define GL16_FINM \
	VPSRAD $3, Z14, Z14; \
	VCVTDQ2PS Z14, Z14; \
	GL16_ROWM(Z0, Z10, Z4, 0); \
	GL16_ROWM(Z1, Z11, Z5, 1); \
	GL16_ROWM(Z2, Z12, Z6, 2); \
	GL16_ROWM(Z3, Z13, Z7, 3)

// GL16_KERNEL is a sixteen-token kernel's body (arguments as
// gemmQ4Kx16VNNI's): WEIGHTS and FINISH as above, BB the block size and
// PF four blocks (immediates). At the end the sixteen tokens' sums are
// spilled over the record for G8_WRITE, as G16_KERNEL does.
#define GL16_KERNEL(WEIGHTS, FINISH, BB, PF) \
	QENTRY(out+48, G16_NOCONST, done); \
group: \
	G16_OPEN; \
	LEAQ 0(SP), R9; \
	TESTQ CX, CX; \
	JZ store; \
	PCALIGN $32; \
block: \
	GL_UNPACK(WEIGHTS); \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	GL_GROUPS(G16_G, Z0, Z1, Z2, Z3); \
	GL16_DX; \
	FINISH; \
	LG_PREFETCH(PF); \
	ADDQ BB, DX; \
	ADDQ $576, R8; \
	ADDQ $576, R11; \
	DECQ CX; \
	JNZ block; \
store: \
	G16_STORE(group, done, rows4, row, tok); \
done: \
	VZEROUPPER; \
	RET

// func gemmQ50x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ50x8VNNI(SB), 0, $288-64
	GL_KERNEL(GL_W50, GL_VSUM, GL_FIN0, $22, $88, v50Group, v50Block, v50Store, v50Rows, v50Row, v50Tok, v50Done)

// func gemmQ51x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ51x8VNNI(SB), 0, $288-64
	GL_KERNEL(WEIGHTS_Q51, GL_VSUM, GL_FINM, $24, $96, v51Group, v51Block, v51Store, v51Rows, v51Row, v51Tok, v51Done)

// func gemmQ40x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ40x16VNNI(SB), 0, $352-72
	GL16_KERNEL(GL_W40, GL16_FIN40, $18, $72)

// func gemmQ41x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ41x16VNNI(SB), 0, $352-72
	GL16_KERNEL(GL_W41, GL16_FINM, $20, $80)

// func gemmQ50x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ50x16VNNI(SB), 0, $352-72
	GL16_KERNEL(GL_W50, GL16_FIN0, $22, $88)

// func gemmQ51x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ51x16VNNI(SB), 0, $352-72
	GL16_KERNEL(WEIGHTS_Q51, GL16_FINM, $24, $96)
