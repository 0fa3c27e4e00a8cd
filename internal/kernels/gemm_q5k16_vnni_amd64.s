//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ5Kx8 for sixteen tokens on AVX-512 VNNI, two interleaved groups of
// eight (xa and xb) in 512-bit registers, laid out as gemmQ4Kx16VNNI
// (gemm_q4k16_vnni_amd64.s, whose comment gives the registers): the
// superblock unpacking into the frame's records is gemmQ5Kx8's (Q4K_HEAD,
// Q4_K's scale records by G4K_SC, the 0..31 quants by G5K_Q), done once
// per group of four rows for all sixteen tokens.
//
// Exactness: the quants are VPDPBUSD's unsigned operand and X_g its
// signed one, so the dword sum of a block is the exact Σq·x that
// gemmQ5Kx8 builds from non-saturating int16 pair sums (at most 7936 a
// pair, four groups at most 31744) widened by VPMADDWD. The float steps
// per (row, block, token) are gemmQ5Kx8's (G5K_ROW's) on sixteen lanes,
// so the bits are those of gemmQ5Kx8 on each group. Where gemmQ5Kx8 has
// to split a block's groups 4..7 into pairs of rows for want of
// registers, the dword sums here take all eight groups of the four rows.

// G5V_SUPER is gemmQ5Kx8's superblock step: the four rows' superblock at
// DX into the records, and the next four rows' share prefetched.
#define G5V_SUPER \
	Q4K_HEAD(k4nib<>(SB)); \
	G4K_SC(0, 96, 256); \
	G4K_SC(8, 416, 576); \
	G4K_SC(16, 736, 896); \
	G4K_SC(24, 1056, 1216); \
	VMOVDQU k4nib<>(SB), Y15; \
	VMOVDQU g5kx10<>(SB), Y14; \
	XORQ AX, AX; \
	G5K_Q(AX, 0); \
	G5K_Q(R12, 32); \
	G5K_Q(R14, 64); \
	G5K_Q(R15, 96); \
	G5K_PF; \
	ADDQ $704, BX


// func gemmQ5Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ5Kx16VNNI(SB), 0, $1376-72
	G16_KERNEL(G5V_SUPER, 176)
