//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_q8vnni_amd64.h"

// The one- to four-token Q8_0 kernels on AVX-512 VNNI: matQ8x1, matQ8x2,
// matQ8x4, matQ8x1s and matQ8x2s (simd_quant_amd64.s) with VPDPBUSD in
// place of VPSIGNB, VPMADDUBSW and VPMADDWD. The groups of four rows, the
// prefetches and the float steps (d = dx·dw as one multiply, dx first,
// then one FMA, as FINISH does) are theirs, and the integer block sums S
// are exact either way, so the bits are too.
//
// VPDPBUSD multiplies unsigned bytes by signed ones, four to a dword
// lane, without saturating. One of the two operands is made unsigned by
// flipping its sign bit: v XOR 0x80 is v+128 as an unsigned byte for
// every v, -128 included, so the products gain 128 times the sum of the
// other operand, which a correction then takes off exactly.
//
// The one- and two-token kernels flip the weights. The correction,
// 128·Σx, is then the token's, the same for all four rows: each token's
// block computes -128·Σx per lane once (VPDPBUSD of bytes of 0x80 against
// x, negated: exact for any x) and every row's sums start from a copy of
// it, which leaves the AVX2 kernels' lane sums Σw·x for SUM4. The copies
// are register moves, which need no arithmetic. The row scales come in
// through general registers (VQ8_SCALES), which leaves the vector
// shuffle ports to SUM4.
//
// The four-token kernel lays the sums out differently (see VQ8_MIX):
// the rows' bytes are rearranged once a block so that each token's sums
// need no SUM4, only an add of the two 128-bit halves; there the
// activations are flipped and the correction, 128·Σw, is the row's,
// computed once a block for all four tokens. That costs more per block
// and less per token, which pays for four tokens only: measured in
// cache, the same layout made the one-token kernel 1.37x and the
// two-token one 1.06x slower than the kernels here.
//
// Register use (ymm), one and two tokens: Y0-Y3 the four rows' flipped
// weights, X4-X5 the tokens' accumulators, Y8 bytes of 0x80, X9 the row
// scales, Y10 the token's block x, Y11-Y15 the row sums and SUM4's
// temporaries, Y16 the token's correction, Y17 zero. Y16 and up exist for
// EVEX instructions only (VPXORD, VPSUBD, VMOVDQA64, VPDPBUSD, ...).
// General registers as the AVX2 kernels', plus up to three scratch ones
// for VQ8_SCALES.

// VQ8_CONST sets Y8 to bytes of 0x80 and clears Y9 and Y17.
#define VQ8_CONST \
	MOVL $0x80808080, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VPXORD Y17, Y17, Y17

// VQ8_WEIGHTS loads the four rows' blocks at DX flipped to w+128 into
// Y0-Y3.
#define VQ8_WEIGHTS \
	VPXOR 2(DX), Y8, Y0; \
	VPXOR 2(DX)(R12*1), Y8, Y1; \
	VPXOR 2(DX)(R14*1), Y8, Y2; \
	VPXOR 2(DX)(R15*1), Y8, Y3

// VQ8_HEAD1 and VQ8_HEAD2 load the four rows' block, scales and
// flipped weights, for the one- and two-token kernels (which have
// different general registers free for VQ8_SCALES).
#define VQ8_HEAD1 \
	VQ8_SCALES(AX, R9, R10); \
	VQ8_WEIGHTS

#define VQ8_HEAD2 \
	VQ8_SCALES(AX, R10, R11); \
	VQ8_WEIGHTS

// func matQ8x1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ8x1VNNI(SB), NOSPLIT, $0-48
	Q1_KERNEL(VQ8_CONST, VQ8_HEAD1, VQ8_TOK, Q_NEXTPF, $34)

// func matQ8x2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ8x2VNNI(SB), NOSPLIT, $0-64
	Q2_KERNEL(VQ8_CONST, VQ8_HEAD2, VQ8_TOK, Q_NEXTPF, $34)

// VQ8_MIX prepares the four-token kernel's block: the four rows' weights
// at DX as four mixtures M0-M3 (Y0-Y3), and -128·Σw of each row in Y16.
//
// In each 128-bit half, lane j of M_p holds row j's dword j^p (p = 0..3),
// so that with x_p, the token's block with dword j^p in lane j (x_0 = x
// and three VPSHUFDs), Σ_p VPDPBUSD(x_p, M_p) has in lane j the sum of
// row j's products over all 16 bytes of the half: four lanes, four rows,
// no reduction but the two halves' add. M_p is a VPSHUFD of Q_p, lane i
// of which is row i^p's own lane i: blends, two levels of them, of the
// rows (pairs e01 = rows 0,1,0,1 and o01 = 1,0,1,0 by lane, then halves
// of the pairs). The weights stay signed; the activations are flipped to
// x+128, so the sums gain 128·Σw, the row's: VPDPBUSD of bytes of 0x80
// against the mixtures, negated, is the same layout of -128·Σw over each
// half, and every token's sums start from it. Two chains of two
// VPDPBUSDs rather than one of four: measured, 1.03x.
//
// Register use: Y10-Y13 (e01, o01, e23, o23) and Y18 scratch; Y17 zero.
#define VQ8_MIX \
	VMOVDQU 2(DX), Y10; \
	VMOVDQU 2(DX)(R14*1), Y12; \
	VPBLENDD $0x55, 2(DX)(R12*1), Y10, Y11; \
	VPBLENDD $0xAA, 2(DX)(R12*1), Y10, Y10; \
	VPBLENDD $0x55, 2(DX)(R15*1), Y12, Y13; \
	VPBLENDD $0xAA, 2(DX)(R15*1), Y12, Y12; \
	VPBLENDD $0xCC, Y12, Y10, Y0; \
	VPBLENDD $0xCC, Y13, Y11, Y1; \
	VPBLENDD $0xCC, Y10, Y12, Y2; \
	VPBLENDD $0xCC, Y11, Y13, Y3; \
	VPSHUFD $0xB1, Y1, Y1; \
	VPSHUFD $0x4E, Y2, Y2; \
	VPSHUFD $0x1B, Y3, Y3; \
	VPXORD Y16, Y16, Y16; \
	VPXORD Y18, Y18, Y18; \
	VPDPBUSD Y0, Y8, Y16; \
	VPDPBUSD Y2, Y8, Y18; \
	VPDPBUSD Y1, Y8, Y16; \
	VPDPBUSD Y3, Y8, Y18; \
	VPADDD Y18, Y16, Y16; \
	VPSUBD Y16, Y17, Y16

// VQ8_PROD sums one token's block (at Rt) against the mixtures into F:
// in each half, lane j row j's exact sum over the half's 16 elements.
// T is a second chain's register; Y10-Y13 hold x+128 and its three
// permutations.
#define VQ8_PROD(Rt, F, T) \
	VPXOR 4(Rt), Y8, Y10; \
	VPSHUFD $0xB1, Y10, Y11; \
	VPSHUFD $0x4E, Y10, Y12; \
	VPSHUFD $0x1B, Y10, Y13; \
	VMOVDQA64 Y16, F; \
	VPXORD T, T, T; \
	VPDPBUSD Y0, Y10, F; \
	VPDPBUSD Y2, Y12, T; \
	VPDPBUSD Y1, Y11, F; \
	VPDPBUSD Y3, Y13, T; \
	VPADDD T, F, F

// VQ8_PAIR adds d·S for two tokens (at Rt and Ru) into ACC, a ymm with
// token t's four rows low and token u's high: the two tokens' halves
// added in one VPADDD, then one convert, multiply and FMA for both, each
// lane's the very operation FINISH does for it (dx the multiply's first
// operand, Y9 the rows' scales in both halves). Measured, 1.05x over
// finishing the tokens one by one.
#define VQ8_PAIR(Rt, Ru, ACC) \
	VQ8_PROD(Rt, Y14, Y15); \
	VQ8_PROD(Ru, Y19, Y20); \
	VSHUFI64X2 $0, Y19, Y14, Y15; \
	VSHUFI64X2 $3, Y19, Y14, Y14; \
	VPADDD Y15, Y14, Y14; \
	VCVTDQ2PS Y14, Y14; \
	VBROADCASTSS (Rt), Y15; \
	VBROADCASTSS (Ru), Y13; \
	VBLENDPS $0xF0, Y13, Y15, Y15; \
	VMULPS Y9, Y15, Y15; \
	VFMADD231PS Y15, Y14, ACC

// func matQ8x4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
//
// Tokens 0 and 1 accumulate in Y4, 2 and 3 in Y6, split into X4-X7 for
// STORE4 at the end of each group; Y14, Y15, Y19 and Y20 hold the pairs'
// sums. The scales come through SCALES, not VQ8_SCALES: with four token
// pointers and the prefetch pointer live, one general register is left.
TEXT ·matQ8x4VNNI(SB), NOSPLIT, $0-64
	QENTRY(out+48, VQ8_CONST, done)

group:
	QGROUP4(QBLOCKS, reduce)

	PCALIGN $32
block:
	SCALES
	VINSERTF128 $1, X9, Y9, Y9
	VQ8_MIX
	VQ8_PAIR(R8, R9, Y4)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	PREFETCHT0 128(BX)
	ADDQ $136, BX
	VQ8_PAIR(R10, R11, Y6)
	ADDQ $34, DX
	ADDQ $36, R8
	ADDQ $36, R9
	ADDQ $36, R10
	ADDQ $36, R11
	DECQ CX
	JNZ block

reduce:
	VEXTRACTF128 $1, Y4, X5
	VEXTRACTF128 $1, Y6, X7
	STORE4(group, partial, done)

partial:
	PARTIAL4(done)

done:
	VZEROUPPER
	RET

// VQ8_S1STEP and VQ8_S2STEP are the four-stream kernels' blocks
// (S1_KERNEL, S2_KERNEL) for one token and two.
#define VQ8_S1STEP \
	VQ8_SCALES(AX, R9, R10); \
	VQ8_WEIGHTS; \
	VQ8_TOK(R8, X4)

#define VQ8_S2STEP \
	VQ8_SCALES(AX, R10, R11); \
	VQ8_WEIGHTS; \
	VQ8_TOK(R8, X4); \
	VQ8_TOK(R9, X5)

// func matQ8x1sVNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32, stride int)
//
// The non-temporal prefetch 512 bytes ahead is matQ8x1s's, for its reason
// (simd_quant_amd64.s): it keeps the weights, read once a token, from
// evicting what attention reads from L3.
TEXT ·matQ8x1sVNNI(SB), NOSPLIT, $0-56
	S1_KERNEL(VQ8_CONST, VQ8_S1STEP)

// func matQ8x2sVNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int, stride int)
TEXT ·matQ8x2sVNNI(SB), NOSPLIT, $0-72
	S2_KERNEL(VQ8_CONST, VQ8_S2STEP)
