// Shared by gemm_legacy_amd64.s and gemm_legacy_vnni_amd64.s (after
// simd_amd64.h, simd_legacy_amd64.h and gemm_kquant_amd64.h): the body of
// the batched legacy kernels and its steps.
//
// The batched Q4_0, Q4_1, Q5_0 and Q5_1 kernels: four weight rows by eight
// tokens per pass on the interleaved activations of gemm_q8_amd64.s, laid
// out as the K-quant ones (gemm_kquant_amd64.s): each register holds one
// row's value for the eight tokens, so the integer sums need no reduction
// across lanes and the float operations per (row, token) are order.go's,
// lane by lane.
//
// Per block the four rows' quants are unpacked as simd_legacy_amd64.h
// does (unsigned: 0..15, or 0..31 for both five-bit types) into a 128-byte
// record at 0(SP), row r's element e at 32r+e, and their scales as
// float32 at 128(SP) (d of rows 0..3, then m; for Q4_0 and Q5_0, which
// have none, whatever the block's next bytes make, never read). GQ_FIRST and GQ_NEXT then
// broadcast a group's four quant bytes from the record against X_g.
//
// Pair sums q·x are at most 2·15·128 = 3840 for Q4_0 and Q4_1, so the
// eight groups add in int16; with five-bit quants (7936) four do, and the
// two halves meet in int32 (the first spilled to 160(SP)). A = Σq·x is
// then exact. Q4_1 and Q5_1: B = Σx is the interleaved 8·Σx shifted right
// by 3 (exact), acc = fma(d·dx, A, acc), then acc = fma(m·dx, B, acc).
// Q5_0: S = A − 16·Σx in int32 (exact), acc = fma(d·dx, S, acc); Q4_0 the
// same with S = A − 8·Σx, the interleaved term as it is.
//
// Registers: Y0-Y3 the rows' sums, Y4-Y7 their accumulators, Y8 int16
// ones, Y9 X_g (then the tokens' dx), Y10-Y13 the broadcast quants, Y14
// the tokens' Σx terms. SI row 0 of the four, R12/R14/R15 rows 1..3, DX
// the block of row 0, R8 the interleaved block, R9 the record, CX blocks
// left, R13 rows left, DI the output, BX the prefetch pointer.

// GL_W40, GL_W41 and GL_W50 unpack the rows' quants into Y0-Y3
// (WEIGHTS_Q51 for Q5_1).
#define GL_W40 \
	LG_NIBS4(2)

#define GL_W41 \
	WEIGHTS_Q41

#define GL_W50 \
	WEIGHTS_Q5(6, 2)

#define GL_MADD4 \
	VPMADDWD Y8, Y0, Y0; \
	VPMADDWD Y8, Y1, Y1; \
	VPMADDWD Y8, Y2, Y2; \
	VPMADDWD Y8, Y3, Y3

// GL_SUM4 and GL_SUM5 leave the rows' A (int32) in Y0-Y3, for four- and
// five-bit quants.
#define GL_SUM4 \
	GQ_FIRST; \
	GQ_NEXT(96, 4); \
	GQ_NEXT(128, 8); \
	GQ_NEXT(160, 12); \
	GQ_NEXT(192, 16); \
	GQ_NEXT(224, 20); \
	GQ_NEXT(256, 24); \
	GQ_NEXT(288, 28); \
	GL_MADD4

#define GL_SUM5 \
	GQ_FIRST; \
	GQ_NEXT(96, 4); \
	GQ_NEXT(128, 8); \
	GQ_NEXT(160, 12); \
	GL_MADD4; \
	VMOVDQU Y0, 160(SP); \
	VMOVDQU Y1, 192(SP); \
	VMOVDQU Y2, 224(SP); \
	VMOVDQU Y3, 256(SP); \
	GQ_FIRSTAT(192, 16); \
	GQ_NEXT(224, 20); \
	GQ_NEXT(256, 24); \
	GQ_NEXT(288, 28); \
	GL_MADD4; \
	VPADDD 160(SP), Y0, Y0; \
	VPADDD 192(SP), Y1, Y1; \
	VPADDD 224(SP), Y2, Y2; \
	VPADDD 256(SP), Y3, Y3

// GL_ROWD adds (d·dx)·S of row R into ACC (S the float sums, T scratch);
// GL_ROWM then (m·dx)·Σx.
#define GL_ROWD(S, T, ACC, R) \
	VBROADCASTSS 128+4*R(SP), T; \
	VMULPS Y9, T, T; \
	VFMADD231PS T, S, ACC

#define GL_ROWM(S, T, ACC, R) \
	VCVTDQ2PS S, S; \
	GL_ROWD(S, T, ACC, R); \
	VBROADCASTSS 144+4*R(SP), T; \
	VMULPS Y9, T, T; \
	VFMADD231PS T, Y14, ACC

#define GL_ROW0(S, T, ACC, R) \
	VPSUBD Y14, S, S; \
	VCVTDQ2PS S, S; \
	GL_ROWD(S, T, ACC, R)

// GL_FINM, GL_FIN0 and GL_FIN40 add the block into the accumulators:
// Q4_1 and Q5_1, Q5_0, Q4_0.
#define GL_FINM \
	VMOVDQU 32(R8), Y14; \
	VPSRAD $3, Y14, Y14; \
	VCVTDQ2PS Y14, Y14; \
	GL_ROWM(Y0, Y10, Y4, 0); \
	GL_ROWM(Y1, Y11, Y5, 1); \
	GL_ROWM(Y2, Y12, Y6, 2); \
	GL_ROWM(Y3, Y13, Y7, 3)

#define GL_FIN0 \
	VMOVDQU 32(R8), Y14; \
	VPSLLD $1, Y14, Y14; \
	GL_ROWS0

#define GL_FIN40 \
	VMOVDQU 32(R8), Y14; \
	GL_ROWS0

// GL_ROWS0 is GL_FIN0's and GL_FIN40's four rows, on the token sums in Y14.
#define GL_ROWS0 \
	GL_ROW0(Y0, Y10, Y4, 0); \
	GL_ROW0(Y1, Y11, Y5, 1); \
	GL_ROW0(Y2, Y12, Y6, 2); \
	GL_ROW0(Y3, Y13, Y7, 3)

// GL_UNPACK writes the four rows' block into the frame: their scales as
// float32 at 128(SP) (LG_SCALESM) and their quants, unpacked by WEIGHTS,
// into the record at 0(SP).
#define GL_UNPACK(WEIGHTS) \
	LG_SCALESM; \
	VMOVUPS Y9, 128(SP); \
	WEIGHTS; \
	VMOVDQU Y0, 0(SP); \
	VMOVDQU Y1, 32(SP); \
	VMOVDQU Y2, 64(SP); \
	VMOVDQU Y3, 96(SP)

// GL_GROUPS adds the eight groups of a block into the four rows' sums A0-A3
// with G (G8V_G or G16_G, the VNNI kernels').
#define GL_GROUPS(G, A0, A1, A2, A3) \
	G(64, 0, A0, A1, A2, A3); \
	G(96, 4, A0, A1, A2, A3); \
	G(128, 8, A0, A1, A2, A3); \
	G(160, 12, A0, A1, A2, A3); \
	G(192, 16, A0, A1, A2, A3); \
	G(224, 20, A0, A1, A2, A3); \
	G(256, 24, A0, A1, A2, A3); \
	G(288, 28, A0, A1, A2, A3)

// GL_KERNEL is a kernel's body: WEIGHTS, SUMS and FINISH as above, BB the
// block size (an immediate), PF four blocks (the prefetch step), the rest
// labels.
#define GL_KERNEL(WEIGHTS, SUMS, FINISH, BB, PF, GROUP, BLOCK, STORE, ROWS, ROW, TOK, DONE) \
	QENTRY(out+40, LG_CONST(lgOnes8<>(SB)), DONE); \
GROUP: \
	GK_ROWS; \
	LEAQ 0(SP), R9; \
	TESTQ CX, CX; \
	JZ STORE; \
BLOCK: \
	GL_UNPACK(WEIGHTS); \
	SUMS; \
	VMOVUPS (R8), Y9; \
	FINISH; \
	LG_PREFETCH(PF); \
	ADDQ BB, DX; \
	ADDQ $576, R8; \
	DECQ CX; \
	JNZ BLOCK; \
STORE: \
	GK_STORE(GROUP, DONE, ROWS, ROW, TOK); \
DONE: \
	VZEROUPPER; \
	RET
