// Shared by simd_q4k_amd64.s, simd_q5k_amd64.s, simd_q6k_amd64.s and
// simd_q3k_amd64.s, their VNNI twins (simd_q*k_vnni_amd64.s, with
// simd_kquant_vnni_amd64.h) and the batched K-quant kernels: the layout
// notes, constants, quant unpacking and reductions of the K-quant kernels.

// AVX2 kernels for Q4_K and Q6_K weights against Q8_0-quantised
// activations (36-byte blocks: a float32 scale, 32 int8 values). They
// reproduce dotQ4KGo and dotQ6KGo bit for bit: the integer sums are exact
// in any order, and the float operations per activation block (one
// multiply for each scale product, an exact convert, one fused
// multiply-add per term, in block order) are the ones order.go fixes.
//
// Layout, as for the Q8_0 kernels: four rows at once, each xmm
// accumulator holding one token's four rows (ROWOFFS clamps the offsets
// of a partial last four). Per 256-element superblock the four rows'
// header is decoded once into the stack frame:
//
//	Q4_K: 0(SP)  sc[j] of rows 0..3 as four bytes at 4j (j = 0..7)
//	      32(SP) m[j] likewise
//	      64(SP) d of rows 0..3 as float32, 80(SP) dmin
//	Q6_K: 0(SP)  the sixteen int8 scales: scale s of rows 0..3 at 4s, so
//	      activation block j finds [s2j of rows 0..3, s2j+1 of rows
//	      0..3] in the eight bytes at 8j
//	      64(SP) d of rows 0..3 as float32
//
// Per activation block the four rows' quants are unpacked into Y0-Y3
// (shared by every token of the call); each token then forms the rows'
// integer dot products with VPMADDUBSW (quants unsigned, x signed) and
// VPMADDWD, reduces them with in-lane unpacks (SUM4, simd_amd64.h), scales them by the
// integer sub-block scales (VPMULLD: exact, |A| < 2^22, |S| < 2^24) and
// adds them into its accumulator.
//
// Q4_K: B = m·Σx needs the token's block sum Σx, formed from the same
// block with VPMADDUBSW against ones. acc += (d·dx)·A, then
// acc −= (dmin·dx)·B with VFNMADD231PS, which is fma(dmin·dx, −B, acc)
// exactly (negating a product is exact, signed zeros included).
//
// Q6_K: quants q are 0..63 and stand for q−32. VPMADDUBSW gives pair
// sums of q·x; subtracting the pair sums of 32·x (|(q−32)·x| pairs stay
// within int16) leaves pair sums of (q−32)·x. VPMADDWD with ones and SUM4
// leave elements 0..15 of rows 0..3 in the low lane and 16..31 in the
// high lane, which is exactly where the two sub-block scales apply: one
// VPMULLD by [s2j of rows 0..3 | s2j+1 of rows 0..3], then the lanes add.
//
// Registers (ymm): Y0-Y3 the rows' quants, X4-X7 the accumulators of up
// to four tokens, Y8 int16 ones, Y9 0x0f bytes, Y10 byte ones (Q4_K) or
// 32s (Q6_K), Y11-Y15 temporaries. General: SI row 0 of the group,
// R12/R14/R15 the offsets of rows 1..3, AX zero (row 0's offset, Q6_K),
// DX the current superblock of row 0, R8-R11 each token's activation
// blocks, CX superblocks left, R13 rows left, DI the output, BX the
// prefetch pointer (the next four rows, one group ahead, as in
// simd_quant_amd64.s).

DATA k4nib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA k4nib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA k4nib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA k4nib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL k4nib<>(SB), RODATA|NOPTR, $32

DATA k4ones8<>+0(SB)/8, $0x0101010101010101
DATA k4ones8<>+8(SB)/8, $0x0101010101010101
DATA k4ones8<>+16(SB)/8, $0x0101010101010101
DATA k4ones8<>+24(SB)/8, $0x0101010101010101
GLOBL k4ones8<>(SB), RODATA|NOPTR, $32

DATA k4ones16<>+0(SB)/8, $0x0001000100010001
DATA k4ones16<>+8(SB)/8, $0x0001000100010001
DATA k4ones16<>+16(SB)/8, $0x0001000100010001
DATA k4ones16<>+24(SB)/8, $0x0001000100010001
GLOBL k4ones16<>(SB), RODATA|NOPTR, $32

DATA k4x30<>+0(SB)/8, $0x3030303030303030
DATA k4x30<>+8(SB)/8, $0x3030303030303030
DATA k4x30<>+16(SB)/8, $0x3030303030303030
DATA k4x30<>+24(SB)/8, $0x3030303030303030
GLOBL k4x30<>(SB), RODATA|NOPTR, $32

DATA k4x3f<>+0(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA k4x3f<>+8(SB)/8, $0x3f3f3f3f3f3f3f3f
GLOBL k4x3f<>(SB), RODATA|NOPTR, $16

DATA k6x20<>+0(SB)/8, $0x2020202020202020
DATA k6x20<>+8(SB)/8, $0x2020202020202020
DATA k6x20<>+16(SB)/8, $0x2020202020202020
DATA k6x20<>+24(SB)/8, $0x2020202020202020
GLOBL k6x20<>(SB), RODATA|NOPTR, $32

// k4ddShuf gathers the float16 d (words 0, 2, 4, 6) then dmin (1, 3, 5, 7)
// of four transposed Q4_K headers.
DATA k4ddShuf<>+0(SB)/8, $0x0d0c090805040100
DATA k4ddShuf<>+8(SB)/8, $0x0f0e0b0a07060302
GLOBL k4ddShuf<>(SB), RODATA|NOPTR, $16

// k4tr4 transposes a 4×4 byte matrix in each dword quadruple: byte j of
// dword r goes to byte r of dword j.
DATA k4tr4<>+0(SB)/8, $0x0d0905010c080400
DATA k4tr4<>+8(SB)/8, $0x0f0b07030e0a0602
DATA k4tr4<>+16(SB)/8, $0x0d0905010c080400
DATA k4tr4<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL k4tr4<>(SB), RODATA|NOPTR, $32

#define KCONST(C10) \
	VMOVDQU k4ones16<>(SB), Y8; \
	VMOVDQU k4nib<>(SB), Y9; \
	VMOVDQU C10, Y10

// Q4K_HEAD decodes the four rows' superblock headers into the frame.
// Each header's first 16 bytes are dwords [d|dmin, u0, u1, u2] (u the
// packed scale bytes 0-3, 4-7, 8-11); transposed, each register holds one
// of them for the four rows, and the 6-bit unpacking of UnpackQ4KScales
// runs on all four at once:
//
//	sc0..3 = u0 & 0x3f, m0..3 = u1 & 0x3f
//	sc4..7 = u2 & 0x0f | (u0>>2) & 0x30, m4..7 = (u2>>4) & 0x0f | (u1>>2) & 0x30
//
// NIB is the 0x0f byte mask: a register, or k4nib<>(SB).
#define Q4K_HEAD(NIB) \
	VMOVDQU (DX), X0; \
	VMOVDQU (DX)(R12*1), X1; \
	VMOVDQU (DX)(R14*1), X2; \
	VMOVDQU (DX)(R15*1), X3; \
	VPUNPCKLDQ X1, X0, X11; \
	VPUNPCKHDQ X1, X0, X12; \
	VPUNPCKLDQ X3, X2, X13; \
	VPUNPCKHDQ X3, X2, X14; \
	VPUNPCKLQDQ X13, X11, X0; \
	VPUNPCKHQDQ X13, X11, X1; \
	VPUNPCKLQDQ X14, X12, X2; \
	VPUNPCKHQDQ X14, X12, X3; \
	VPSHUFB k4ddShuf<>(SB), X0, X0; \
	VCVTPH2PS X0, Y0; \
	VMOVUPS Y0, 64(SP); \
	VPAND k4x3f<>(SB), X1, X11; \
	VPAND k4x3f<>(SB), X2, X12; \
	VPSRLD $2, X1, X13; \
	VPAND k4x30<>(SB), X13, X13; \
	VPAND NIB, X3, X14; \
	VPOR X14, X13, X13; \
	VPSRLD $2, X2, X14; \
	VPAND k4x30<>(SB), X14, X14; \
	VPSRLD $4, X3, X15; \
	VPAND NIB, X15, X15; \
	VPOR X15, X14, X14; \
	VINSERTI128 $1, X13, Y11, Y11; \
	VINSERTI128 $1, X14, Y12, Y12; \
	VPSHUFB k4tr4<>(SB), Y11, Y11; \
	VPSHUFB k4tr4<>(SB), Y12, Y12; \
	VMOVDQU Y11, 0(SP); \
	VMOVDQU Y12, 32(SP)

// ---- Q4_K and Q5_K, once a block's quants are in Y0-Y3 ----

// K_DOT4 leaves in Y11 the four rows' integer sums Σq·x of the
// activation block at XO(Rt) against the unsigned quants in Y0-Y3 (SUM4's
// layout: elements 0..15 of rows 0..3 in the low lane, 16..31 in the
// high lane).
#define K_DOT4(Rt, XO) \
	VPMADDUBSW XO+4(Rt), Y0, Y11; \
	VPMADDUBSW XO+4(Rt), Y1, Y12; \
	VPMADDUBSW XO+4(Rt), Y2, Y13; \
	VPMADDUBSW XO+4(Rt), Y3, Y14; \
	VPMADDWD Y8, Y11, Y11; \
	VPMADDWD Y8, Y12, Y12; \
	VPMADDWD Y8, Y13, Y13; \
	VPMADDWD Y8, Y14, Y14; \
	SUM4

// KM_A leaves in X11 the four rows' A = sc·Σq·x (as float32) of the
// activation block at XO(Rt) against the quants in Y0-Y3, SO locating sc.
#define KM_A(Rt, XO, SO) \
	KM_ADOT(K_DOT4, Rt, XO, SO)

// KM_ADOT is KM_A with the four rows' dot products by DOT (K_DOT4 or its
// VNNI twin).
#define KM_ADOT(DOT, Rt, XO, SO) \
	DOT(Rt, XO); \
	VEXTRACTI128 $1, Y11, X12; \
	VPADDD X12, X11, X11; \
	VPMOVZXBD SO(SP), X12; \
	VPMULLD X12, X11, X11; \
	VCVTDQ2PS X11, X11

// KM_TOKLO adds the even activation block 2c of chunk c (at XO(Rt),
// sub-block scales at SO) into ACC, and leaves the odd block's B in the
// frame at SLOT for KM_TOKHI. Both blocks' Σx are reduced together: their
// dword sums, lane-swapped into [halves of block 2c | halves of 2c+1],
// add and fold to each block's sum in its four lanes, then one multiply by
// [m2c of rows 0..3 | m2c+1 of rows 0..3] gives both blocks' B.
#define KM_TOKLO(Rt, XO, SO, ACC, SLOT) \
	KM_A(Rt, XO, SO); \
	VPMADDUBSW XO+4(Rt), Y10, Y12; \
	VPMADDUBSW XO+40(Rt), Y10, Y13; \
	VPMADDWD Y8, Y12, Y12; \
	VPMADDWD Y8, Y13, Y13; \
	KM_BFOLD(Rt, XO, SO, ACC, SLOT)

// KM_BFOLD is KM_TOKLO from the two blocks' dword sums of x (Y12, Y13)
// on: they fold to both blocks' B, the odd one's goes to SLOT, and the
// even block's terms go into ACC.
#define KM_BFOLD(Rt, XO, SO, ACC, SLOT) \
	VPERM2I128 $0x20, Y13, Y12, Y14; \
	VPERM2I128 $0x31, Y13, Y12, Y12; \
	VPADDD Y12, Y14, Y14; \
	VPSHUFD $0x4e, Y14, Y12; \
	VPADDD Y12, Y14, Y14; \
	VPSHUFD $0xb1, Y14, Y12; \
	VPADDD Y12, Y14, Y14; \
	VPMOVZXBD SO+32(SP), Y12; \
	VPMULLD Y12, Y14, Y14; \
	VCVTDQ2PS Y14, Y14; \
	VEXTRACTF128 $1, Y14, SLOT(SP); \
	VBROADCASTSS XO(Rt), X12; \
	VMULPS 64(SP), X12, X13; \
	VMULPS 80(SP), X12, X12; \
	VFMADD231PS X13, X11, ACC; \
	VFNMADD231PS X12, X14, ACC

// KM_TOKHI adds the odd block 2c+1 (at XO(Rt), scales at SO) into ACC,
// its B read back from SLOT.
#define KM_TOKHI(Rt, XO, SO, ACC, SLOT) \
	KM_A(Rt, XO, SO); \
	KM_HITERMS(Rt, XO, ACC, SLOT)

// KM_HITERMS is KM_TOKHI after its A: the odd block's two terms.
#define KM_HITERMS(Rt, XO, ACC, SLOT) \
	VBROADCASTSS XO(Rt), X12; \
	VMULPS 64(SP), X12, X13; \
	VMULPS 80(SP), X12, X12; \
	VFMADD231PS X13, X11, ACC; \
	VFNMADD231PS SLOT(SP), X12, ACC

// KM_TOKS1, KM_TOKS2 and KM_TOKS4 run the token step TOK (KM_TOKLO or
// KM_TOKHI, or a VNNI twin) for one, two or four tokens, each with its
// accumulator and frame slot.
#define KM_TOKS1(TOK, XO, SO) \
	TOK(R8, XO, SO, X4, 96)

#define KM_TOKS2(TOK, XO, SO) \
	TOK(R8, XO, SO, X4, 96); \
	TOK(R9, XO, SO, X5, 112)

#define KM_TOKS4(TOK, XO, SO) \
	TOK(R8, XO, SO, X4, 96); \
	TOK(R9, XO, SO, X5, 112); \
	TOK(R10, XO, SO, X6, 128); \
	TOK(R11, XO, SO, X7, 144)

#define KM_LO1(XO, SO) KM_TOKS1(KM_TOKLO, XO, SO)
#define KM_HI1(XO, SO) KM_TOKS1(KM_TOKHI, XO, SO)
#define KM_LO2(XO, SO) KM_TOKS2(KM_TOKLO, XO, SO)
#define KM_HI2(XO, SO) KM_TOKS2(KM_TOKHI, XO, SO)
#define KM_LO4(XO, SO) KM_TOKS4(KM_TOKLO, XO, SO)
#define KM_HI4(XO, SO) KM_TOKS4(KM_TOKHI, XO, SO)

// KX_ENTRY1 and KX_ENTRY start a one-token kernel and a two- or four-token
// one (QENTRY) with the constants of KCONST(C10).
#define KX_ENTRY1(C10, DONE) \
	QENTRY(out+40, KCONST(C10), DONE)

#define KX_ENTRY(C10, DONE) \
	QENTRY(out+48, KCONST(C10), DONE)

// KX_SUPERS is QGROUP1/2/4's BLOCKS for the K-quant kernels: the first
// superblock in DX, AX zero and the superblock count (from the frame
// argument NB, in blocks of 32) in CX; with none it jumps to REDUCE.
#define KX_SUPERS(NB, REDUCE) \
	MOVQ SI, DX; \
	XORQ AX, AX; \
	MOVQ NB(FP), CX; \
	SHRQ $3, CX; \
	JZ REDUCE

// KX_GROUP1, KX_GROUP2 and KX_GROUP4 start a group of four rows over
// superblocks.
#define KX_GROUP1(REDUCE) \
	QGROUP1(KX_SUPERS, REDUCE)

#define KX_GROUP2(REDUCE) \
	QGROUP2(KX_SUPERS, REDUCE)

#define KX_GROUP4(REDUCE) \
	QGROUP4(KX_SUPERS, REDUCE)

// ---- Signed 16-element sub-blocks (Q6_K, Q3_K) ----

// KS_STORE transposes the sixteen int8 scales of rows 0..3 (X0-X3) into
// the frame: scale s of rows 0..3 as four bytes at 4s(SP), so that
// activation block j finds [s2j of rows 0..3, s2j+1 of rows 0..3] in the
// eight bytes at 8j.
#define KS_STORE \
	VPUNPCKLBW X1, X0, X11; \
	VPUNPCKHBW X1, X0, X12; \
	VPUNPCKLBW X3, X2, X13; \
	VPUNPCKHBW X3, X2, X14; \
	VPUNPCKLWD X13, X11, X0; \
	VPUNPCKHWD X13, X11, X1; \
	VPUNPCKLWD X14, X12, X2; \
	VPUNPCKHWD X14, X12, X3; \
	VMOVDQU X0, 0(SP); \
	VMOVDQU X1, 16(SP); \
	VMOVDQU X2, 32(SP); \
	VMOVDQU X3, 48(SP)

// KD_F16 stores the four rows' float16 d at OFF in the block as float32 at
// 64(SP), read as words so that nothing past the block is touched.
#define KD_F16(OFF) \
	VPXOR X11, X11, X11; \
	VPINSRW $0, OFF(DX), X11, X11; \
	VPINSRW $1, OFF(DX)(R12*1), X11, X11; \
	VPINSRW $2, OFF(DX)(R14*1), X11, X11; \
	VPINSRW $3, OFF(DX)(R15*1), X11, X11; \
	VCVTPH2PS X11, X11; \
	VMOVUPS X11, 64(SP)

// KS_TOK adds activation block XO/36 of the token at Rt into ACC for the
// four rows whose unsigned quants q are in Y0-Y3, standing for q−z, z the
// bytes of Y10 (32 for Q6_K, 4 for Q3_K): VPMADDUBSW's pair sums of q·x
// less those of z·x are the pair sums of (q−z)·x, within int16. SO =
// 8·XO/36 locates the block's two scales, which VPMULLD applies to the
// two lanes (elements 0..15, 16..31) after SUM4.
#define KS_TOK(Rt, XO, SO, ACC) \
	VPMADDUBSW XO+4(Rt), Y10, Y15; \
	VPMADDUBSW XO+4(Rt), Y0, Y11; \
	VPMADDUBSW XO+4(Rt), Y1, Y12; \
	VPMADDUBSW XO+4(Rt), Y2, Y13; \
	VPMADDUBSW XO+4(Rt), Y3, Y14; \
	VPSUBW Y15, Y11, Y11; \
	VPSUBW Y15, Y12, Y12; \
	VPSUBW Y15, Y13, Y13; \
	VPSUBW Y15, Y14, Y14; \
	VPMADDWD Y8, Y11, Y11; \
	VPMADDWD Y8, Y12, Y12; \
	VPMADDWD Y8, Y13, Y13; \
	VPMADDWD Y8, Y14, Y14; \
	SUM4; \
	VPMOVSXBD SO(SP), Y12; \
	VPMULLD Y12, Y11, Y11; \
	VEXTRACTI128 $1, Y11, X12; \
	VPADDD X12, X11, X11; \
	VCVTDQ2PS X11, X11; \
	VBROADCASTSS XO(Rt), X12; \
	VMULPS 64(SP), X12, X12; \
	VFMADD231PS X12, X11, ACC

// K_T1, K_T2 and K_T4 run the per-token step TOK (KS_TOK, or Q2K_TOK in
// simd_q3k_amd64.s) for one, two or four tokens.
#define K_T1(TOK, XO, SO) \
	TOK(R8, XO, SO, X4)

#define K_T2(TOK, XO, SO) \
	TOK(R8, XO, SO, X4); \
	TOK(R9, XO, SO, X5)

#define K_T4(TOK, XO, SO) \
	TOK(R8, XO, SO, X4); \
	TOK(R9, XO, SO, X5); \
	TOK(R10, XO, SO, X6); \
	TOK(R11, XO, SO, X7)

// ---- Q3_K and Q2_K quants (simd_q3k_amd64.s, gemm_kquant_amd64.s) ----

DATA k3x03<>+0(SB)/8, $0x0303030303030303
DATA k3x03<>+8(SB)/8, $0x0303030303030303
DATA k3x03<>+16(SB)/8, $0x0303030303030303
DATA k3x03<>+24(SB)/8, $0x0303030303030303
GLOBL k3x03<>(SB), RODATA|NOPTR, $32

DATA k3x04<>+0(SB)/8, $0x0404040404040404
DATA k3x04<>+8(SB)/8, $0x0404040404040404
DATA k3x04<>+16(SB)/8, $0x0404040404040404
DATA k3x04<>+24(SB)/8, $0x0404040404040404
GLOBL k3x04<>(SB), RODATA|NOPTR, $32

// k3lo picks scale bytes 0..7 (bytes 2..9 of a load at block offset 94)
// twice; k3hi broadcasts bytes 8..11 (10..13) to every dword; k3shv
// shifts dword k right by 2k.
DATA k3lo<>+0(SB)/8, $0x0908070605040302
DATA k3lo<>+8(SB)/8, $0x0908070605040302
GLOBL k3lo<>(SB), RODATA|NOPTR, $16

DATA k3hi<>+0(SB)/8, $0x0d0c0b0a0d0c0b0a
DATA k3hi<>+8(SB)/8, $0x0d0c0b0a0d0c0b0a
GLOBL k3hi<>(SB), RODATA|NOPTR, $16

DATA k3shv<>+0(SB)/8, $0x0000000200000000
DATA k3shv<>+8(SB)/8, $0x0000000600000004
GLOBL k3shv<>(SB), RODATA|NOPTR, $16

// K2_Q loads into Y the two low bits (at shift SH of the qs bytes at QO)
// of the row at offset R.
#define K2_Q(QO, SH, R, Y) \
	VMOVDQU QO(DX)(R*1), Y; \
	VPSRLW $SH, Y, Y; \
	VPAND Y9, Y, Y

// Q3K_SC unpacks the sixteen scales of the row at offset R into XR as
// int8 sc−32 (UnpackQ3KScales): the low nibbles of bytes 0..7 then their
// high nibbles, or'ed with bits 2(s/4), 2(s/4)+1 of byte 8+s%4 moved to
// bits 4, 5. The load starts at block offset 94 (two qs bytes, the twelve
// scale bytes, d) so that it ends inside the block.
#define Q3K_SC(R, XR) \
	VMOVDQU 94(DX)(R*1), X11; \
	VPSHUFB k3lo<>(SB), X11, X12; \
	VPSRLW $4, X12, X13; \
	VPBLENDD $0x0c, X13, X12, X12; \
	VPAND k4nib<>(SB), X12, X12; \
	VPSHUFB k3hi<>(SB), X11, X13; \
	VPSRLVD k3shv<>(SB), X13, X13; \
	VPAND X9, X13, X13; \
	VPSLLW $4, X13, X13; \
	VPOR X13, X12, X12; \
	VPSUBB k6x20<>(SB), X12, XR

// Q3K_Q loads block j's quants of the row at offset R into Y: the low
// bits (K2_Q at QO, SH) or'ed with bit j of the hmask bytes moved to bit
// 2 by HOP $HSH (a left or right word shift).
#define Q3K_Q(QO, SH, HOP, HSH, R, Y) \
	K2_Q(QO, SH, R, Y); \
	VMOVDQU (DX)(R*1), Y15; \
	HOP $HSH, Y15, Y15; \
	VPAND Y10, Y15, Y15; \
	VPOR Y15, Y, Y

// K2_DD stores the four rows' Q2_K d and dmin (bytes 80..83, as Q4_K's
// first four) as float32 at SLOT(SP) and SLOT+16(SP).
#define K2_DD(SLOT) \
	VMOVD 80(DX), X11; \
	VPINSRD $1, 80(DX)(R12*1), X11, X11; \
	VPINSRD $2, 80(DX)(R14*1), X11, X11; \
	VPINSRD $3, 80(DX)(R15*1), X11, X11; \
	VPSHUFB k4ddShuf<>(SB), X11, X11; \
	VCVTPH2PS X11, Y11; \
	VMOVUPS Y11, SLOT(SP)

// ---- Q4_K and Q6_K quants (simd_q4k_amd64.s, simd_q6k_amd64.s and
// their VNNI twins) ----

// Q4K_LO and Q4K_HI unpack the low or high nibbles of the four rows' 32
// quant bytes at OFF: sub-block 2c and 2c+1 of chunk c.
#define Q4K_LO(OFF) \
	VPAND OFF(DX), Y9, Y0; \
	VPAND OFF(DX)(R12*1), Y9, Y1; \
	VPAND OFF(DX)(R14*1), Y9, Y2; \
	VPAND OFF(DX)(R15*1), Y9, Y3

#define Q4K_HI(OFF) \
	VMOVDQU OFF(DX), Y0; \
	VMOVDQU OFF(DX)(R12*1), Y1; \
	VMOVDQU OFF(DX)(R14*1), Y2; \
	VMOVDQU OFF(DX)(R15*1), Y3; \
	VPSRLW $4, Y0, Y0; \
	VPSRLW $4, Y1, Y1; \
	VPSRLW $4, Y2, Y2; \
	VPSRLW $4, Y3, Y3; \
	VPAND Y9, Y0, Y0; \
	VPAND Y9, Y1, Y1; \
	VPAND Y9, Y2, Y2; \
	VPAND Y9, Y3, Y3

// Q4K_PREFETCH fetches this superblock's share (4·144 bytes) of the next
// four rows.
#define Q4K_PREFETCH \
	K_PF9; \
	ADDQ $576, BX

// K_PF9 fetches the nine cache lines at BX.
#define K_PF9 \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	PREFETCHT0 192(BX); \
	PREFETCHT0 256(BX); \
	PREFETCHT0 320(BX); \
	PREFETCHT0 384(BX); \
	PREFETCHT0 448(BX); \
	PREFETCHT0 512(BX)

// Q6K_HEAD transposes the four rows' sixteen int8 scales into the frame
// and stores their d as float32 at 64(SP) (KS_STORE, KD_F16).
#define Q6K_HEAD \
	VMOVDQU 192(DX), X0; \
	VMOVDQU 192(DX)(R12*1), X1; \
	VMOVDQU 192(DX)(R14*1), X2; \
	VMOVDQU 192(DX)(R15*1), X3; \
	KS_STORE; \
	KD_F16(208)

// Quarter k of a half: low four bits from the low (k = 0, 1) or high
// (k = 2, 3) nibbles of ql at QL, high two bits from bits 2k, 2k+1 of qh
// at QH, moved to bits 4, 5. R is the row's offset register, Y the
// destination; Y15 is scratch.
#define Q6K_Q0(QL, QH, R, Y) \
	VPAND QL(DX)(R*1), Y9, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSLLW $4, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q1(QL, QH, R, Y) \
	VPAND QL(DX)(R*1), Y9, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSLLW $2, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q2(QL, QH, R, Y) \
	VMOVDQU QL(DX)(R*1), Y; \
	VPSRLW $4, Y, Y; \
	VPAND Y9, Y, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q3(QL, QH, R, Y) \
	VMOVDQU QL(DX)(R*1), Y; \
	VPSRLW $4, Y, Y; \
	VPAND Y9, Y, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSRLW $2, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

// Q6K_ROWS0 .. Q6K_ROWS3 unpack quarter 0..3 of the four rows' quants
// (Q6K_ROWS with Q6K_Q0 .. Q6K_Q3) into Y0-Y3.
#define Q6K_ROWS(Q, QL, QH) \
	Q(QL, QH, AX, Y0); \
	Q(QL, QH, R12, Y1); \
	Q(QL, QH, R14, Y2); \
	Q(QL, QH, R15, Y3)

#define Q6K_ROWS0(QL, QH) Q6K_ROWS(Q6K_Q0, QL, QH)
#define Q6K_ROWS1(QL, QH) Q6K_ROWS(Q6K_Q1, QL, QH)
#define Q6K_ROWS2(QL, QH) Q6K_ROWS(Q6K_Q2, QL, QH)
#define Q6K_ROWS3(QL, QH) Q6K_ROWS(Q6K_Q3, QL, QH)

// Q6K_PREFETCH fetches this superblock's share (4·210 bytes) of the next
// four rows.
#define Q6K_PREFETCH \
	K_PF9; \
	PREFETCHT0 576(BX); \
	PREFETCHT0 640(BX); \
	PREFETCHT0 704(BX); \
	PREFETCHT0 768(BX); \
	PREFETCHT0 832(BX); \
	ADDQ $840, BX

// ---- Q5_K quants (simd_q5k_amd64.s and its VNNI twin) ----

// k5bit holds the byte masks 1<<k: activation block k's quants take bit k
// of each qh byte, and 0x10 (entry 4) is the fifth bit's value.
DATA k5bit<>+0(SB)/8, $0x8040201008040201
GLOBL k5bit<>(SB), RODATA|NOPTR, $8

// Q5K_BIT ORs 16 into the four rows' quants in Y0-Y3 where bit K of their
// qh bytes is set: (qh & 1<<K) == 1<<K gives 0xff, masked to 0x10.
#define Q5K_BIT(K) \
	VPBROADCASTB k5bit<>+K(SB), Y12; \
	VPBROADCASTB k5bit<>+4(SB), Y14; \
	VPAND 16(DX), Y12, Y13; \
	VPCMPEQB Y12, Y13, Y13; \
	VPAND Y14, Y13, Y13; \
	VPOR Y13, Y0, Y0; \
	VPAND 16(DX)(R12*1), Y12, Y13; \
	VPCMPEQB Y12, Y13, Y13; \
	VPAND Y14, Y13, Y13; \
	VPOR Y13, Y1, Y1; \
	VPAND 16(DX)(R14*1), Y12, Y13; \
	VPCMPEQB Y12, Y13, Y13; \
	VPAND Y14, Y13, Y13; \
	VPOR Y13, Y2, Y2; \
	VPAND 16(DX)(R15*1), Y12, Y13; \
	VPCMPEQB Y12, Y13, Y13; \
	VPAND Y14, Y13, Y13; \
	VPOR Y13, Y3, Y3

// Q5K_LO and Q5K_HI unpack the four rows' quants of activation block K:
// the low (K even) or high (K odd) nibbles of the 32 bytes at OFF, and
// bit K of qh.
#define Q5K_LO(OFF, K) \
	Q4K_LO(OFF); \
	Q5K_BIT(K)

#define Q5K_HI(OFF, K) \
	Q4K_HI(OFF); \
	Q5K_BIT(K)

// Q5K_PREFETCH fetches this superblock's share (4·176 bytes) of the next
// four rows.
#define Q5K_PREFETCH \
	K_PF9; \
	PREFETCHT0 576(BX); \
	PREFETCHT0 640(BX); \
	ADDQ $704, BX

// ---- Q3_K and Q2_K headers and quants (simd_q3k_amd64.s and its VNNI
// twin) ----

// K23CONST is KCONST with Y9 the 0x03 bytes.
#define K23CONST(C10) \
	VMOVDQU k4ones16<>(SB), Y8; \
	VMOVDQU k3x03<>(SB), Y9; \
	VMOVDQU C10, Y10

// Q3K_HEAD and Q2K_HEAD decode the four rows' headers into the frame,
// Q3K_ROWS and Q2K_ROWS unpack one activation block's quants into Y0-Y3.
#define Q3K_HEAD \
	Q3K_SC(AX, X0); \
	Q3K_SC(R12, X1); \
	Q3K_SC(R14, X2); \
	Q3K_SC(R15, X3); \
	KS_STORE; \
	KD_F16(108)

#define Q3K_ROWS(QO, SH, HOP, HSH) \
	Q3K_Q(QO, SH, HOP, HSH, AX, Y0); \
	Q3K_Q(QO, SH, HOP, HSH, R12, Y1); \
	Q3K_Q(QO, SH, HOP, HSH, R14, Y2); \
	Q3K_Q(QO, SH, HOP, HSH, R15, Y3)

// Q2K_HEAD stores the four rows' scales and mins and their d and dmin
// (bytes 80..83, as Q4_K's first four) into the frame.
#define Q2K_HEAD \
	VMOVDQU (DX), X0; \
	VMOVDQU (DX)(R12*1), X1; \
	VMOVDQU (DX)(R14*1), X2; \
	VMOVDQU (DX)(R15*1), X3; \
	KS_STORE; \
	VMOVDQU 0(SP), Y0; \
	VMOVDQU 32(SP), Y1; \
	VPSRLW $4, Y0, Y2; \
	VPSRLW $4, Y1, Y3; \
	VPAND k4nib<>(SB), Y0, Y0; \
	VPAND k4nib<>(SB), Y1, Y1; \
	VPAND k4nib<>(SB), Y2, Y2; \
	VPAND k4nib<>(SB), Y3, Y3; \
	VMOVDQU Y0, 0(SP); \
	VMOVDQU Y1, 32(SP); \
	VMOVDQU Y2, 64(SP); \
	VMOVDQU Y3, 96(SP); \
	K2_DD(128)

#define Q2K_ROWS(QO, SH) \
	K2_Q(QO, SH, AX, Y0); \
	K2_Q(QO, SH, R12, Y1); \
	K2_Q(QO, SH, R14, Y2); \
	K2_Q(QO, SH, R15, Y3)

// Q3K_SUPERT and Q2K_SUPERT run one superblock for the tokens of T (K_T1,
// K_T2, K_T4) with the per-token step TOK (KS_TOK or Q2K_TOK, or their
// VNNI forms).
#define Q3K_SUPERT(T, TOK) \
	Q3K_HEAD; \
	Q3K_ROWS(32, 0, VPSLLW, 2); \
	T(TOK, 0, 0); \
	Q3K_ROWS(32, 2, VPSLLW, 1); \
	T(TOK, 36, 8); \
	Q3K_ROWS(32, 4, VPSRLW, 0); \
	T(TOK, 72, 16); \
	Q3K_ROWS(32, 6, VPSRLW, 1); \
	T(TOK, 108, 24); \
	Q3K_ROWS(64, 0, VPSRLW, 2); \
	T(TOK, 144, 32); \
	Q3K_ROWS(64, 2, VPSRLW, 3); \
	T(TOK, 180, 40); \
	Q3K_ROWS(64, 4, VPSRLW, 4); \
	T(TOK, 216, 48); \
	Q3K_ROWS(64, 6, VPSRLW, 5); \
	T(TOK, 252, 56); \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	PREFETCHT0 192(BX); \
	PREFETCHT0 256(BX); \
	PREFETCHT0 320(BX); \
	PREFETCHT0 384(BX); \
	ADDQ $440, BX; \
	ADDQ $110, DX

#define Q2K_SUPERT(T, TOK) \
	Q2K_HEAD; \
	Q2K_ROWS(16, 0); \
	T(TOK, 0, 0); \
	Q2K_ROWS(16, 2); \
	T(TOK, 36, 8); \
	Q2K_ROWS(16, 4); \
	T(TOK, 72, 16); \
	Q2K_ROWS(16, 6); \
	T(TOK, 108, 24); \
	Q2K_ROWS(48, 0); \
	T(TOK, 144, 32); \
	Q2K_ROWS(48, 2); \
	T(TOK, 180, 40); \
	Q2K_ROWS(48, 4); \
	T(TOK, 216, 48); \
	Q2K_ROWS(48, 6); \
	T(TOK, 252, 56); \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	PREFETCHT0 192(BX); \
	PREFETCHT0 256(BX); \
	PREFETCHT0 320(BX); \
	ADDQ $336, BX; \
	ADDQ $84, DX

// Q2_K's token step in two halves around the dword sums of x (Q2K_TOK,
// simd_q3k_amd64.s, and its VNNI twin).

// Q2K_A leaves the four rows' A in X11 as float32, from their dot
// products by DOT (K_DOT4 or its VNNI twin) times the scales at SO.
#define Q2K_A(DOT, Rt, XO, SO) \
	DOT(Rt, XO); \
	VPMOVZXBD SO(SP), Y12; \
	VPMULLD Y12, Y11, Y11; \
	VEXTRACTI128 $1, Y11, X12; \
	VPADDD X12, X11, X11; \
	VCVTDQ2PS X11, X11

// Q2K_B is Q2K_TOK from the dword sums of x (Y12) on: B from them and the
// mins at SO+64, and both terms into ACC.
#define Q2K_B(Rt, XO, SO, ACC) \
	VPSHUFD $0x4e, Y12, Y13; \
	VPADDD Y13, Y12, Y12; \
	VPSHUFD $0xb1, Y12, Y13; \
	VPADDD Y13, Y12, Y12; \
	VPMOVZXBD SO+64(SP), Y13; \
	VPMULLD Y13, Y12, Y12; \
	VEXTRACTI128 $1, Y12, X13; \
	VPADDD X13, X12, X12; \
	VCVTDQ2PS X12, X12; \
	VBROADCASTSS XO(Rt), X13; \
	VMULPS 128(SP), X13, X14; \
	VMULPS 144(SP), X13, X13; \
	VFMADD231PS X14, X11, ACC; \
	VFNMADD231PS X13, X12, ACC
