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

// gemmQ8x16VNNI is gemmQ8x8VNNI for sixteen tokens, two interleaved
// groups of eight (xa and xb, qInterleave8's layout), in 512-bit
// registers. Its point is the loads: a VPDPBUSD's four weight bytes come
// broadcast from memory, and on a Zen 4 two loads a cycle bound the
// eight-token kernel, which loads one dword of weights per 32
// multiply-adds, well before VPDPBUSD's own rate does; here one load
// serves 64. A 512-bit VPDPBUSD issues at half the 256-bit rate, so the
// multiply rate itself is the same.
//
// Here the activations are flipped (x XOR 0x80, once per group for the
// four rows) and the weights are VPDPBUSD's signed operand, broadcast by
// the instruction, so the sums gain 128·Σw, the row's: they start from
// q8NegSums's -128·Σw of each block, computed once per tile on the Go
// side, whose table also holds the blocks' scales as float32. The float
// steps per (row, block, token) are FMAROW's, the same bits.
//
// Register use (zmm): Z0-Z3 and Z16-Z19 the rows' even and odd sums, Z4-Z7
// the float accumulators (tokens 0..15 of rows 0..3), Z8 bytes of 0x80,
// Z9 X_g flipped, Z15 scales, Z20 the sixteen tokens' scales. General: as
// gemmQ8x8VNNI's, except that BX walks the rows ahead bytes on (the next
// tile's, not the next group's), plus R10 group B's current block and R9
// the current entry of the sums table, kept at 0(SP) across the stores.

// Q16_G multiplies the four rows' weight bytes WOFF..WOFF+3 of the block
// at DX by group g of the sixteen tokens (at XOFF in both groups' blocks)
// into A0-A3.
#define Q16_G(WOFF, XOFF, A0, A1, A2, A3) \
	VMOVDQU XOFF(R8), Y9; \
	VINSERTI64X4 $1, XOFF(R10), Z9, Z9; \
	VPXORD Z8, Z9, Z9; \
	VPDPBUSD.BCST WOFF(DX), Z9, A0; \
	VPDPBUSD.BCST WOFF(DX)(R12*1), Z9, A1; \
	VPDPBUSD.BCST WOFF(DX)(R14*1), Z9, A2; \
	VPDPBUSD.BCST WOFF(DX)(R15*1), Z9, A3

#define Q16_EVEN(WOFF, XOFF) \
	Q16_G(WOFF, XOFF, Z0, Z1, Z2, Z3)

#define Q16_ODD(WOFF, XOFF) \
	Q16_G(WOFF, XOFF, Z16, Z17, Z18, Z19)

// Q16_FMAROW adds d·S for one row and sixteen tokens: the row's two sums
// added and converted, times its scale (float32 at W) times the tokens'
// scales (Z20).
#define Q16_FMAROW(W, S, S2, ACC) \
	VPADDD S2, S, S; \
	VCVTDQ2PS S, S; \
	VBROADCASTSS W, Z15; \
	VMULPS Z20, Z15, Z15; \
	VFMADD231PS Z15, S, ACC

// func gemmQ8x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int, sums *int32, ahead int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
// BX walks the four rows ahead bytes on from each group's, a block's
// share (136 bytes) at a time.
TEXT ·gemmQ8x16VNNI(SB), NOSPLIT, $320-88
	QENTRY(out+48, Q8V_CONST, done)
	VPBROADCASTD X8, Z8
	MOVQ sums+72(FP), R9
	MOVQ R9, 0(SP)

group:
	ROWOFFS
	MOVQ ahead+80(FP), BX
	ADDQ SI, BX
	MOVQ xa+24(FP), R8
	MOVQ xb+32(FP), R10
	MOVQ 0(SP), R9
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ SI, DX
	MOVQ nb+40(FP), CX
	TESTQ CX, CX
	JZ store

	PCALIGN $32
block:
	VPBROADCASTD 0(R9), Z0
	VPBROADCASTD 4(R9), Z1
	VPBROADCASTD 8(R9), Z2
	VPBROADCASTD 12(R9), Z3
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VMOVUPS (R8), Y20
	VINSERTF64X4 $1, (R10), Z20, Z20
	Q16_EVEN(2, 64)
	Q16_ODD(6, 96)
	Q16_EVEN(10, 128)
	Q16_ODD(14, 160)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	PREFETCHT0 128(BX)
	ADDQ $136, BX
	Q16_EVEN(18, 192)
	Q16_ODD(22, 224)
	Q16_EVEN(26, 256)
	Q16_ODD(30, 288)
	Q16_FMAROW(16(R9), Z0, Z16, Z4)
	Q16_FMAROW(20(R9), Z1, Z17, Z5)
	Q16_FMAROW(24(R9), Z2, Z18, Z6)
	Q16_FMAROW(28(R9), Z3, Z19, Z7)
	ADDQ $34, DX
	ADDQ $576, R8
	ADDQ $576, R10
	ADDQ $32, R9
	DECQ CX
	JNZ block

store:
	// Spill the four rows' sixteen tokens and write the ntok real
	// tokens of the (up to four) real rows.
	MOVQ R9, 0(SP)
	VMOVUPS Z4, 64(SP)
	VMOVUPS Z5, 128(SP)
	VMOVUPS Z6, 192(SP)
	VMOVUPS Z7, 256(SP)
	G8_WRITE(group, done, rows4, row, tok, 64, 64, ntok+64, ostride+56)

done:
	VZEROUPPER
	RET

DATA q8vOnes<>+0(SB)/4, $0x01010101
GLOBL q8vOnes<>(SB), RODATA|NOPTR, $4

// func q8NegSums(w unsafe.Pointer, rowBytes, rows, nb int, dst *int32)
//
// For every group of four rows (the last clamped to the last row, as
// ROWOFFS clamps it) and every block b, writes 32 bytes at
// dst[(g·nb+b)·8]: -128·Σw of the four rows' block b as four int32s (row
// 4g+k's at k), then their scales as four float32s. The sum of a block is
// one VPDPBUSD against bytes of one, then a reduction of its eight lanes
// (integer adds, exact in any order); the scales are converted exactly,
// so converting them once per tile rather than once per group of tokens
// changes no bit.
TEXT ·q8NegSums(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ rows+16(FP), R13
	MOVQ dst+32(FP), DI
	VPBROADCASTD q8vOnes<>(SB), Y8
	TESTQ R13, R13
	JLE nsDone

nsGroup:
	ROWOFFS
	MOVQ SI, DX
	MOVQ nb+24(FP), CX
	TESTQ CX, CX
	JZ nsNext

nsBlock:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPDPBUSD 2(DX), Y8, Y0
	VPDPBUSD 2(DX)(R12*1), Y8, Y1
	VPDPBUSD 2(DX)(R14*1), Y8, Y2
	VPDPBUSD 2(DX)(R15*1), Y8, Y3
	VPHADDD Y1, Y0, Y0
	VPHADDD Y3, Y2, Y2
	VPHADDD Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSLLD $7, X0, X0
	VPXOR X1, X1, X1
	VPSUBD X0, X1, X0
	VMOVDQU X0, (DI)
	MOVWQZX (DX), AX
	MOVWQZX (DX)(R12*1), BX
	SHLQ $16, BX
	ORQ BX, AX
	MOVWQZX (DX)(R14*1), BX
	SHLQ $32, BX
	ORQ BX, AX
	MOVWQZX (DX)(R15*1), BX
	SHLQ $48, BX
	ORQ BX, AX
	VMOVQ AX, X0
	VCVTPH2PS X0, X0
	VMOVUPS X0, 16(DI)
	ADDQ $32, DI
	ADDQ $34, DX
	DECQ CX
	JNZ nsBlock

nsNext:
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), SI
	SUBQ $4, R13
	JG nsGroup

nsDone:
	VZEROUPPER
	RET
