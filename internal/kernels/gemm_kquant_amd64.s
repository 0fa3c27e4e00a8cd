//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// The batched K-quant kernels: four weight rows by eight tokens per pass,
// on the interleaved activations of gemm_q8_amd64.s (xiBlock bytes per
// activation block: dx of the eight tokens at 0, their 8·Σx at 32, X_g at
// 64+32g holding elements 4g..4g+3 of each token). As in gemmQ8x8 each
// register holds one row's value for the eight tokens, so the integer sums
// need no reduction across lanes, and the float operations per (row,
// token) are order.go's, lane by lane.
//
// Per 256-element superblock the four rows are decoded once into the
// frame, one 160-byte record per activation block j (at 96+160j):
//
//	0   the quants of rows 0..3 for block j, 32 bytes each, as bytes
//	    0..15 (Q4_K), 0..63 (Q6_K), 0..7 (Q3_K) or 0..3 (Q2_K), element
//	    e at 32r+e (Q3_K's and Q2_K's records: at the end of the file)
//	128 Q4_K: sc_j of rows 0..3 as float32;  Q6_K: s_2j likewise
//	144 Q4_K: m_j/8 of rows 0..3 as float32; Q6_K: s_2j+1 likewise
//
// and 64(SP) holds d of rows 0..3 as float32, 80(SP) dmin (Q4_K). A
// group's four quant bytes are then broadcast straight from the frame
// (a load, no shuffle), and VPMADDUBSW(quants unsigned, X_g signed) gives
// pair sums for the eight tokens.
//
// Q4_K: a pair is at most 2·15·128 = 3840, so the eight groups of a block
// add in int16 (at most 30720) before one VPMADDWD. A = sc·S is the
// exact product of floats (|A| < 2^22). B = m·Σx is cvt(8·Σx)·(m/8): m/8
// and the product are exact (|B| < 2^18), so B is the integer order.go
// names. Then acc = fma(d·dx, A, acc) and VFNMADD231PS for fma(dmin·dx,
// −B, acc).
//
// Q6_K: pairs of q·x (q 0..63) are at most 16128, so two groups add in
// int16 before VPMADDWD; groups 0..3 form sub-block 2j's sum, 4..7 sub-
// block 2j+1's. Each half less 32·(its Σx) is Σ(q−32)·x; the half sums of
// x come from X_g against byte ones, shared by the four rows. S =
// s0·S0 + s1·S1 formed in float is exact (every partial below 2^24),
// then acc = fma(d·dx, S, acc).
//
// Registers: Y0-Y3 the rows' sums, Y4-Y7 their accumulators, Y8 int16
// ones, Y9 X_g (then dx), Y10-Y13 the broadcast quants, Y14 Σx terms,
// Y15 scratch. SI row 0 of the four, R12/R14/R15 rows 1..3 (ROWOFFS), DX
// the superblock of row 0, R8 the interleaved block, R9 the record, R10
// blocks left in the superblock, CX superblocks left, R13 rows left, DI
// the output, BX the prefetch pointer.

// G4K_ROW adds row R's block into ACC: S the int16 pair sums, T scratch,
// Y9 the tokens' dx, Y14 their cvt(8·Σx).
#define G4K_ROW(S, T, ACC, R) \
	VPMADDWD Y8, S, S; \
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

// func gemmQ4Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
// The frame is too large for NOSPLIT.
TEXT ·gemmQ4Kx8(SB), 0, $1376-64
	GK_ENTRY(g4kDone)

g4kGroup:
	GK_GROUP(g4kStore)

g4kSuper:
	G4K_SUPER
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g4kBlock:
	GQ_FIRST
	GQ_NEXT(96, 4)
	GQ_NEXT(128, 8)
	GQ_NEXT(160, 12)
	GQ_NEXT(192, 16)
	GQ_NEXT(224, 20)
	GQ_NEXT(256, 24)
	GQ_NEXT(288, 28)
	VMOVUPS (R8), Y9
	VCVTDQ2PS 32(R8), Y14
	G4K_ROW(Y0, Y10, Y4, 0)
	G4K_ROW(Y1, Y11, Y5, 1)
	G4K_ROW(Y2, Y12, Y6, 2)
	G4K_ROW(Y3, Y13, Y7, 3)
	ADDQ $160, R9
	ADDQ $576, R8
	DECQ R10
	JNZ g4kBlock
	ADDQ $144, DX
	DECQ CX
	JNZ g4kSuper

g4kStore:
	GK_STORE(g4kGroup, g4kDone, g4kRows, g4kRow, g4kTok)

g4kDone:
	VZEROUPPER
	RET

// ---- Q6_K ----

// G6K_SX stores z·Σx (z = 2^SH: 32 for Q6_K, 4 for Q3_K) of the tokens'
// elements in groups XO..XO+3 (one sub-block) at SLOT(SP); Y15 holds byte
// ones.
#define G6K_SX(XO, SLOT, SH) \
	VPMADDUBSW XO(R8), Y15, Y9; \
	VPMADDUBSW XO+32(R8), Y15, Y14; \
	VPADDW Y14, Y9, Y9; \
	VPMADDUBSW XO+64(R8), Y15, Y14; \
	VPADDW Y14, Y9, Y9; \
	VPMADDUBSW XO+96(R8), Y15, Y14; \
	VPADDW Y14, Y9, Y9; \
	VPMADDWD Y8, Y9, Y9; \
	VPSLLD $SH, Y9, Y9; \
	VMOVDQU Y9, SLOT(SP)

// G6K_S sets S to row R's dword sums of q·x over the four groups from XO
// (quant bytes at WO in its record): two groups add in int16 (at most
// 2·16128) before each VPMADDWD.
#define G6K_S(R, XO, WO, S) \
	VBROADCASTSS WO+32*R(R9), Y9; \
	VPMADDUBSW XO(R8), Y9, Y9; \
	VBROADCASTSS WO+4+32*R(R9), Y14; \
	VPMADDUBSW XO+32(R8), Y14, Y14; \
	VPADDW Y14, Y9, Y9; \
	VPMADDWD Y8, Y9, S; \
	VBROADCASTSS WO+8+32*R(R9), Y9; \
	VPMADDUBSW XO+64(R8), Y9, Y9; \
	VBROADCASTSS WO+12+32*R(R9), Y14; \
	VPMADDUBSW XO+96(R8), Y14, Y14; \
	VPADDW Y14, Y9, Y9; \
	VPMADDWD Y8, Y9, Y9; \
	VPADDD Y9, S, S

// G6K_ROW adds row R's block into ACC: S0 and S1 its two sub-blocks'
// sums of q·x, less z·Σx gives Σ(q−z)·x; s0·S0 + s1·S1 is exact in
// float, then acc = fma(d·dx, S, acc).
#define G6K_ROW(S0, S1, ACC, R) \
	VPSUBD 0(SP), S0, S0; \
	VPSUBD 32(SP), S1, S1; \
	VCVTDQ2PS S0, S0; \
	VCVTDQ2PS S1, S1; \
	VBROADCASTSS 128+4*R(R9), Y9; \
	VMULPS Y9, S0, S0; \
	VBROADCASTSS 144+4*R(R9), Y14; \
	VFMADD231PS Y14, S1, S0; \
	VBROADCASTSS 64+4*R(SP), Y9; \
	VMULPS (R8), Y9, Y9; \
	VFMADD231PS Y9, S0, ACC

// G6K_BLOCK adds one activation block against the records at R9 into
// Y4-Y7 (ROW: G6K_ROW, the quants standing for q−2^SH; or G2K_ROW, SH 0)
// and moves R9 on by REC bytes and R8 on by one block; the flags are DECQ
// R10's, for the loop.
#define G6K_BLOCK(SH, ROW, REC) \
	VMOVDQU k4ones8<>(SB), Y15; \
	G6K_SX(64, 0, SH); \
	G6K_SX(192, 32, SH); \
	G6K_S(0, 64, 0, Y0); \
	G6K_S(1, 64, 0, Y1); \
	G6K_S(2, 64, 0, Y2); \
	G6K_S(3, 64, 0, Y3); \
	G6K_S(0, 192, 16, Y10); \
	G6K_S(1, 192, 16, Y11); \
	G6K_S(2, 192, 16, Y12); \
	G6K_S(3, 192, 16, Y13); \
	ROW(Y0, Y10, Y4, 0); \
	ROW(Y1, Y11, Y5, 1); \
	ROW(Y2, Y12, Y6, 2); \
	ROW(Y3, Y13, Y7, 3); \
	ADDQ $REC, R9; \
	ADDQ $576, R8; \
	DECQ R10

// func gemmQ6Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// is gemmQ4Kx8 for Q6_K weights.
TEXT ·gemmQ6Kx8(SB), 0, $1376-64
	GK_ENTRY(g6kDone)

g6kGroup:
	GK_GROUP(g6kStore)

g6kSuper:
	G6K_SUPER
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g6kBlock:
	G6K_BLOCK(5, G6K_ROW, 160)
	JNZ g6kBlock
	ADDQ $210, DX
	DECQ CX
	JNZ g6kSuper

g6kStore:
	GK_STORE(g6kGroup, g6kDone, g6kRows, g6kRow, g6kTok)

g6kDone:
	VZEROUPPER
	RET

// ---- Q3_K ----

// G3K_SC unpacks row R's sixteen scales (Q3K_SC, X9 the 0x03 mask) into
// the frame at 1376+16·RI.
#define G3K_SC(R, RI) \
	Q3K_SC(R, X0); \
	VMOVDQU X0, 1376+16*RI(SP)

// G3K_REC stores the four rows' quants of one block (Q3K_Q: Y9 0x03 and
// Y10 0x04 bytes) in record A.
#define G3K_REC(QO, SH, HOP, HSH, A) \
	Q3K_Q(QO, SH, HOP, HSH, AX, Y0); \
	VMOVDQU Y0, A(SP); \
	Q3K_Q(QO, SH, HOP, HSH, R12, Y0); \
	VMOVDQU Y0, A+32(SP); \
	Q3K_Q(QO, SH, HOP, HSH, R14, Y0); \
	VMOVDQU Y0, A+64(SP); \
	Q3K_Q(QO, SH, HOP, HSH, R15, Y0); \
	VMOVDQU Y0, A+96(SP)

// func gemmQ3Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// is gemmQ6Kx8 for Q3_K weights: the same records, quants 0..7 standing
// for q−4 (so pairs add far inside int16), the signed scales unpacked
// through the frame at 1376.
TEXT ·gemmQ3Kx8(SB), 0, $1440-64
	GK_ENTRY(g3kDone)

g3kGroup:
	GK_GROUP(g3kStore)

g3kSuper:
	XORQ AX, AX
	VMOVDQU k3x03<>(SB), Y9
	G3K_SC(AX, 0)
	G3K_SC(R12, 1)
	G3K_SC(R14, 2)
	G3K_SC(R15, 3)
	G6K_SCM(1376(SP), 1392(SP), 1408(SP), 1424(SP), 96, 256, 416, 576)
	G6K_SCM(1384(SP), 1400(SP), 1416(SP), 1432(SP), 736, 896, 1056, 1216)
	KD_F16(108)
	VMOVDQU k3x04<>(SB), Y10
	G3K_REC(32, 0, VPSLLW, 2, 96)
	G3K_REC(32, 2, VPSLLW, 1, 256)
	G3K_REC(32, 4, VPSRLW, 0, 416)
	G3K_REC(32, 6, VPSRLW, 1, 576)
	G3K_REC(64, 0, VPSRLW, 2, 736)
	G3K_REC(64, 2, VPSRLW, 3, 896)
	G3K_REC(64, 4, VPSRLW, 4, 1056)
	G3K_REC(64, 6, VPSRLW, 5, 1216)
	K_PF9
	ADDQ $440, BX
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g3kBlock:
	G6K_BLOCK(2, G6K_ROW, 160)
	JNZ g3kBlock
	ADDQ $110, DX
	DECQ CX
	JNZ g3kSuper

g3kStore:
	GK_STORE(g3kGroup, g3kDone, g3kRows, g3kRow, g3kTok)

g3kDone:
	VZEROUPPER
	RET

// ---- Q2_K ----

// The Q2_K records are 192 bytes: Q6_K's, then m_2j of rows 0..3 as
// float32 at 160 and m_2j+1 at 176 (sc_2j and sc_2j+1 at 128 and 144).
// 0(SP) and 32(SP) hold the tokens' Σx of the block's two halves (G6K_SX
// with SH 0), 64(SP) d and 80(SP) dmin of rows 0..3, and the frame from
// 1632 the rows' scales (16 bytes each) then mins.

// G2K_NIB splits row R's sixteen scale bytes into scales (low nibbles) at
// 1632+16·RI and mins (high nibbles) at 1696+16·RI.
#define G2K_NIB(R, RI) \
	VMOVDQU (DX)(R*1), X0; \
	VPAND k4nib<>(SB), X0, X1; \
	VMOVDQU X1, 1632+16*RI(SP); \
	VPSRLW $4, X0, X0; \
	VPAND k4nib<>(SB), X0, X0; \
	VMOVDQU X0, 1696+16*RI(SP)

// G2K_REC stores the four rows' quants of one block (K2_Q, Y9 0x03 bytes)
// in record A.
#define G2K_REC(QO, SH, A) \
	K2_Q(QO, SH, AX, Y0); \
	VMOVDQU Y0, A(SP); \
	K2_Q(QO, SH, R12, Y0); \
	VMOVDQU Y0, A+32(SP); \
	K2_Q(QO, SH, R14, Y0); \
	VMOVDQU Y0, A+64(SP); \
	K2_Q(QO, SH, R15, Y0); \
	VMOVDQU Y0, A+96(SP)

// G2K_ROW adds row R's block into ACC: A = sc0·S0 + sc1·S1 and B = m0·T0
// + m1·T1 (T the halves' Σx) formed in float are exact (every partial
// below 2^24), then acc = fma(d·dx, A, acc) and fma(dmin·dx, −B, acc).
#define G2K_ROW(S0, S1, ACC, R) \
	VCVTDQ2PS S0, S0; \
	VCVTDQ2PS S1, S1; \
	VBROADCASTSS 128+4*R(R9), Y9; \
	VMULPS Y9, S0, S0; \
	VBROADCASTSS 144+4*R(R9), Y14; \
	VFMADD231PS Y14, S1, S0; \
	VCVTDQ2PS 0(SP), Y15; \
	VBROADCASTSS 160+4*R(R9), Y9; \
	VMULPS Y9, Y15, Y15; \
	VCVTDQ2PS 32(SP), S1; \
	VBROADCASTSS 176+4*R(R9), Y14; \
	VFMADD231PS Y14, S1, Y15; \
	VBROADCASTSS 64+4*R(SP), Y9; \
	VMULPS (R8), Y9, Y9; \
	VFMADD231PS Y9, S0, ACC; \
	VBROADCASTSS 80+4*R(SP), Y9; \
	VMULPS (R8), Y9, Y9; \
	VFNMADD231PS Y9, Y15, ACC

// func gemmQ2Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// is gemmQ4Kx8 for Q2_K weights, on gemmQ6Kx8's block loop.
TEXT ·gemmQ2Kx8(SB), 0, $1760-64
	GK_ENTRY(g2kDone)

g2kGroup:
	GK_GROUP(g2kStore)

g2kSuper:
	XORQ AX, AX
	G2K_NIB(AX, 0)
	G2K_NIB(R12, 1)
	G2K_NIB(R14, 2)
	G2K_NIB(R15, 3)
	G6K_SCM(1632(SP), 1648(SP), 1664(SP), 1680(SP), 96, 288, 480, 672)
	G6K_SCM(1640(SP), 1656(SP), 1672(SP), 1688(SP), 864, 1056, 1248, 1440)
	G6K_SCM(1696(SP), 1712(SP), 1728(SP), 1744(SP), 128, 320, 512, 704)
	G6K_SCM(1704(SP), 1720(SP), 1736(SP), 1752(SP), 896, 1088, 1280, 1472)
	K2_DD(64)
	VMOVDQU k3x03<>(SB), Y9
	G2K_REC(16, 0, 96)
	G2K_REC(16, 2, 288)
	G2K_REC(16, 4, 480)
	G2K_REC(16, 6, 672)
	G2K_REC(48, 0, 864)
	G2K_REC(48, 2, 1056)
	G2K_REC(48, 4, 1248)
	G2K_REC(48, 6, 1440)
	K_PF9
	ADDQ $336, BX
	LEAQ 96(SP), R9
	MOVQ $8, R10

	PCALIGN $32
g2kBlock:
	G6K_BLOCK(0, G2K_ROW, 192)
	JNZ g2kBlock
	ADDQ $84, DX
	DECQ CX
	JNZ g2kSuper

g2kStore:
	GK_STORE(g2kGroup, g2kDone, g2kRows, g2kRow, g2kTok)

g2kDone:
	VZEROUPPER
	RET
