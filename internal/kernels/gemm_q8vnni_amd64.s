//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "gemm_kquant_amd64.h"

// The batched Q8_0 kernel on AVX-512 VNNI: gemmQ8x8's layout (four
// weight rows by eight tokens, one register holding one row's value for
// the eight tokens, the activations interleaved by qInterleave8), with
// each step of 32 multiply-adds one VPDPBUSD instead of gemmQ8x8's
// VPSIGNB, VPMADDUBSW, VPMADDWD and VPADDD.
//
// VPDPBUSD multiplies unsigned bytes by signed ones. The weights are made
// unsigned by flipping their sign bit (w XOR 0x80 is w+128 as an unsigned
// byte, for every w including -128, so unlike gemmQ8x8 this kernel needs
// no scan for -128), which adds 128·Σx to each token's block sum. Σx is
// the token's, not the row's: the interleaved block already holds 8·Σx
// for every token, so the sums start from -16 times that and come out as
// the exact S of order.go. The float steps are gemmQ8x8's FMAROW, so the
// bits are those of every other Q8_0 path.
//
// VPDPBUSD's latency is several cycles, so each row sums its even and odd
// groups into two registers (Y0-Y3 and Y16-Y19), eight chains in flight.
//
// Register use: Y0-Y3 and Y16-Y19 the rows' block sums (int32, then
// converted), Y4-Y7 their float accumulators, Y8 bytes of 0x80, Y9 X_g,
// Y10-Y13 the four rows' weights, broadcast and flipped, Y14 the sums'
// starting value, Y15 scales. General registers as gemmQ8x8's.

// Q8V_CONST sets Y8 to bytes of 0x80.
#define Q8V_CONST \
	MOVL $0x80808080, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8

// Q8V_ROWS multiplies the four rows' weight bytes WOFF..WOFF+3 of the
// block at DX by group X_g (in Y9) into A0-A3.
#define Q8V_ROWS(WOFF, A0, A1, A2, A3) \
	VPXORD.BCST WOFF(DX), Y8, Y10; \
	VPXORD.BCST WOFF(DX)(R12*1), Y8, Y11; \
	VPXORD.BCST WOFF(DX)(R14*1), Y8, Y12; \
	VPXORD.BCST WOFF(DX)(R15*1), Y8, Y13; \
	VPDPBUSD Y9, Y10, A0; \
	VPDPBUSD Y9, Y11, A1; \
	VPDPBUSD Y9, Y12, A2; \
	VPDPBUSD Y9, Y13, A3

// Q8V_EVEN and Q8V_ODD take group g (weights at 2+4g, X_g at 64+32g).
#define Q8V_EVEN(WOFF, XOFF) \
	VMOVDQU XOFF(R8), Y9; \
	Q8V_ROWS(WOFF, Y0, Y1, Y2, Y3)

#define Q8V_ODD(WOFF, XOFF) \
	VMOVDQU XOFF(R8), Y9; \
	Q8V_ROWS(WOFF, Y16, Y17, Y18, Y19)

// Q8V_FMAROW adds d·S for one row: the row's two sums added and
// converted, times the row's scale (float16 at W) times the tokens'
// scales, as gemmQ8x8's FMAROW.
#define Q8V_FMAROW(W, S, S2, ACC) \
	VPADDD S2, S, S; \
	VCVTDQ2PS S, S; \
	VPBROADCASTW W, X15; \
	VCVTPH2PS X15, Y15; \
	VMULPS (R8), Y15, Y15; \
	VFMADD231PS Y15, S, ACC

// func gemmQ8x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ8x8VNNI(SB), NOSPLIT, $224-64
	QENTRY(out+40, Q8V_CONST, done)

group:
	GK_ROWS
	TESTQ CX, CX
	JZ store

	PCALIGN $32
block:
	// The sums start at -128·Σx: 8·Σx shifted left by four, negated.
	VMOVDQU 32(R8), Y14
	VPSLLD $4, Y14, Y14
	VPXOR Y9, Y9, Y9
	VPSUBD Y14, Y9, Y14
	VMOVDQA Y14, Y0
	VMOVDQA Y14, Y1
	VMOVDQA Y14, Y2
	VMOVDQA Y14, Y3
	VPXORD Y16, Y16, Y16
	VPXORD Y17, Y17, Y17
	VPXORD Y18, Y18, Y18
	VPXORD Y19, Y19, Y19
	Q8V_EVEN(2, 64)
	Q8V_ODD(6, 96)
	Q8V_EVEN(10, 128)
	Q8V_ODD(14, 160)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	PREFETCHT0 128(BX)
	ADDQ $136, BX
	Q8V_EVEN(18, 192)
	Q8V_ODD(22, 224)
	Q8V_EVEN(26, 256)
	Q8V_ODD(30, 288)
	Q8V_FMAROW((DX), Y0, Y16, Y4)
	Q8V_FMAROW((DX)(R12*1), Y1, Y17, Y5)
	Q8V_FMAROW((DX)(R14*1), Y2, Y18, Y6)
	Q8V_FMAROW((DX)(R15*1), Y3, Y19, Y7)
	ADDQ $34, DX
	ADDQ $576, R8
	DECQ CX
	JNZ block

store:
	GK_STORE(group, done, rows4, row, tok)

done:
	VZEROUPPER
	RET
