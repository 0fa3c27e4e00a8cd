// Shared by the batched K-quant kernels: the eight-token AVX2 ones
// (gemm_kquant_amd64.s, gemm_q5k_amd64.s) and the VNNI ones for eight and
// sixteen tokens (gemm_kquant_vnni_amd64.s, gemm_q4k16_vnni_amd64.s,
// gemm_q5k16_vnni_amd64.s, gemm_q6k16_vnni_amd64.s); the legacy ones
// (gemm_legacy_amd64.s, gemm_legacy_vnni_amd64.s, through
// gemm_legacy_amd64.h); and the VNNI Q8_0 ones (gemm_q8vnni_amd64.s,
// for GK_ROWS and GK_STORE).

// GQ_FIRST and GQ_NEXT add group G's pair sums of the four rows to Y0-Y3
// (GQ_FIRST sets them).
#define GQ_FIRST \
	GQ_FIRSTAT(64, 0)

// GQ_FIRSTAT is GQ_FIRST for the group at XO (activations) and WO (quants).
#define GQ_FIRSTAT(XO, WO) \
	GQ_LOAD(XO, WO); \
	VPMADDUBSW Y9, Y10, Y0; \
	VPMADDUBSW Y9, Y11, Y1; \
	VPMADDUBSW Y9, Y12, Y2; \
	VPMADDUBSW Y9, Y13, Y3

#define GQ_NEXT(XO, WO) \
	GQ_LOAD(XO, WO); \
	VPMADDUBSW Y9, Y10, Y10; \
	VPMADDUBSW Y9, Y11, Y11; \
	VPMADDUBSW Y9, Y12, Y12; \
	VPMADDUBSW Y9, Y13, Y13; \
	VPADDW Y10, Y0, Y0; \
	VPADDW Y11, Y1, Y1; \
	VPADDW Y12, Y2, Y2; \
	VPADDW Y13, Y3, Y3

// GQ_LOAD loads X_g (at XO) into Y9 and broadcasts the four rows' quant
// bytes of the group (at WO in the record) into Y10-Y13.
#define GQ_LOAD(XO, WO) \
	VMOVDQU XO(R8), Y9; \
	VBROADCASTSS WO(R9), Y10; \
	VBROADCASTSS WO+32(R9), Y11; \
	VBROADCASTSS WO+64(R9), Y12; \
	VBROADCASTSS WO+96(R9), Y13

// GK_STORE writes out[t*ostride/4 + r] for the (up to four) real rows and
// the ntok real tokens from Y4-Y7, then moves SI and DI to the next four
// rows, or leaves.
#define GK_STORE(LOOP, DONE, ROWS, ROW, TOK) \
	VMOVUPS Y4, 96(SP); \
	VMOVUPS Y5, 128(SP); \
	VMOVUPS Y6, 160(SP); \
	VMOVUPS Y7, 192(SP); \
	G8_WRITE(LOOP, DONE, ROWS, ROW, TOK, 96, 32, ntok+56, ostride+48)

// GK_ENTRY starts an eight-token K-quant kernel (arguments as gemmQ8x8's;
// QENTRY): weights in SI, rows left in R13, the output in DI, int16 ones
// in Y8 (GK_CONST); with no rows it jumps to DONE.
#define GK_CONST \
	VMOVDQU k4ones16<>(SB), Y8

#define GK_ENTRY(DONE) \
	QENTRY(out+40, GK_CONST, DONE)

// GK_GROUP starts a group of four rows: their offsets and the prefetch
// pointer (QROWS), the interleaved activations in R8, zeroed accumulators
// Y4-Y7, the first superblock in DX and the superblock count in CX; with
// none it jumps to STORE.
#define GK_GROUP(STORE) \
	GK_ROWS; \
	SHRQ $3, CX; \
	JZ STORE

// GK_ROWS is GK_GROUP but for the count: CX holds nb (the legacy kernels,
// gemm_legacy_amd64.s, step block by block).
#define GK_ROWS \
	QROWS(xi); \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	MOVQ SI, DX; \
	MOVQ nb+32(FP), CX

// Q4_K's superblock unpacking for the batched kernels (gemmQ4Kx8 and its
// VNNI twins for eight and sixteen tokens).

DATA g4kEighth<>+0(SB)/8, $0x3e0000003e000000
DATA g4kEighth<>+8(SB)/8, $0x3e0000003e000000
DATA g4kEighth<>+16(SB)/8, $0x3e0000003e000000
DATA g4kEighth<>+24(SB)/8, $0x3e0000003e000000
GLOBL g4kEighth<>(SB), RODATA|NOPTR, $32


// G4K_SC converts sc and m of blocks J and J+1 (at SO(SP), SO+32(SP)) to
// float32 (m divided by 8) in records A and B (frame offsets).
#define G4K_SC(SO, A, B) \
	VPMOVZXBD SO(SP), Y10; \
	VCVTDQ2PS Y10, Y10; \
	VMOVUPS X10, A+128(SP); \
	VEXTRACTF128 $1, Y10, B+128(SP); \
	VPMOVZXBD SO+32(SP), Y11; \
	VCVTDQ2PS Y11, Y11; \
	VMULPS g4kEighth<>(SB), Y11, Y11; \
	VMOVUPS X11, A+144(SP); \
	VEXTRACTF128 $1, Y11, B+144(SP)

// G4K_NIB stores row R's low nibbles of the 32 quant bytes at OFF to
// record A, the high ones to record B (blocks 2c and 2c+1 of chunk c).
#define G4K_NIB(OFF, R, Y, A, B) \
	VMOVDQU OFF(DX)(R*1), Y; \
	VPAND Y15, Y, Y0; \
	VMOVDQU Y0, A(SP); \
	VPSRLW $4, Y, Y; \
	VPAND Y15, Y, Y; \
	VMOVDQU Y, B(SP)

#define G4K_CHUNK(OFF, A, B) \
	G4K_NIB(OFF, AX, Y10, A, B); \
	G4K_NIB(OFF, R12, Y11, A+32, B+32); \
	G4K_NIB(OFF, R14, Y12, A+64, B+64); \
	G4K_NIB(OFF, R15, Y13, A+96, B+96)

// G4K_SUPER unpacks the four rows' superblock at DX into the frame's
// records (scales, mins and the quants' nibbles, two blocks a chunk) and
// prefetches the next four rows' share.
#define G4K_SUPER \
	Q4K_HEAD(k4nib<>(SB)); \
	G4K_SC(0, 96, 256); \
	G4K_SC(8, 416, 576); \
	G4K_SC(16, 736, 896); \
	G4K_SC(24, 1056, 1216); \
	VMOVDQU k4nib<>(SB), Y15; \
	XORQ AX, AX; \
	G4K_CHUNK(16, 96, 256); \
	G4K_CHUNK(48, 416, 576); \
	G4K_CHUNK(80, 736, 896); \
	G4K_CHUNK(112, 1056, 1216); \
	K_PF9; \
	ADDQ $576, BX

// Q5_K's quant unpacking for the batched kernels (gemmQ5Kx8 and its VNNI
// twin for sixteen tokens); the scales are Q4_K's records (G4K_SC).

// g5kx10 is the fifth bit's value in every byte.
DATA g5kx10<>+0(SB)/8, $0x1010101010101010
DATA g5kx10<>+8(SB)/8, $0x1010101010101010
DATA g5kx10<>+16(SB)/8, $0x1010101010101010
DATA g5kx10<>+24(SB)/8, $0x1010101010101010
GLOBL g5kx10<>(SB), RODATA|NOPTR, $32

// G5K_C stores the quants of blocks 2c and 2c+1 (records A and B, row
// offset RO) from row R's 32 quant bytes of chunk c at OFF: the low, then
// high, nibbles, with bits 0 and 1 of Y1 (qh shifted right by 2c, so
// bits 2c and 2c+1 of each qh byte; a word shift leaves them in their
// byte) moved to bit 4. Y15 holds 0x0f bytes, Y14 0x10.
#define G5K_C(OFF, R, RO, A, B) \
	VMOVDQU OFF(DX)(R*1), Y10; \
	VPSLLW $4, Y1, Y2; \
	VPAND Y14, Y2, Y2; \
	VPAND Y15, Y10, Y0; \
	VPOR Y2, Y0, Y0; \
	VMOVDQU Y0, A+RO(SP); \
	VPSLLW $3, Y1, Y2; \
	VPAND Y14, Y2, Y2; \
	VPSRLW $4, Y10, Y10; \
	VPAND Y15, Y10, Y10; \
	VPOR Y2, Y10, Y10; \
	VMOVDQU Y10, B+RO(SP)

// G5K_Q stores row R's quants of the superblock's eight blocks at row
// offset RO of the records.
#define G5K_Q(R, RO) \
	VMOVDQU 16(DX)(R*1), Y1; \
	G5K_C(48, R, RO, 96, 256); \
	VPSRLW $2, Y1, Y1; \
	G5K_C(80, R, RO, 416, 576); \
	VPSRLW $2, Y1, Y1; \
	G5K_C(112, R, RO, 736, 896); \
	VPSRLW $2, Y1, Y1; \
	G5K_C(144, R, RO, 1056, 1216)

// G5K_PF fetches the eleven cache lines at BX: a superblock's share,
// 4·176 bytes, of the next four rows.
#define G5K_PF \
	K_PF9; \
	PREFETCHT0 576(BX); \
	PREFETCHT0 640(BX)

// GK_PF14 fetches fourteen cache lines at BX (Q6_K's share, 4·210 bytes,
// of the next four rows); K_PF9 (simd_kquant_amd64.h) nine, Q4_K's 4·144.
#define GK_PF14 \
	K_PF9; \
	PREFETCHT0 576(BX); \
	PREFETCHT0 640(BX); \
	PREFETCHT0 704(BX); \
	PREFETCHT0 768(BX); \
	PREFETCHT0 832(BX)

// Q6_K's superblock unpacking for the batched kernels (gemmQ6Kx8 and its
// VNNI twins for eight and sixteen tokens).

// G6K_SC converts the four rows' int8 scales s_K..s_K+7 (at OFF) to
// float32 and transposes them into records A..D (blocks K/2..K/2+3):
// block j's s_2j at 128, s_2j+1 at 144. G6K_SCM does it for scales at
// the memory operands M0..M3 (rows 0..3).
#define G6K_SC(OFF, A, B, C, D) \
	G6K_SCM(OFF(DX), OFF(DX)(R12*1), OFF(DX)(R14*1), OFF(DX)(R15*1), A, B, C, D)

#define G6K_SCM(M0, M1, M2, M3, A, B, C, D) \
	VPMOVSXBD M0, Y0; \
	VPMOVSXBD M1, Y1; \
	VPMOVSXBD M2, Y2; \
	VPMOVSXBD M3, Y3; \
	VCVTDQ2PS Y0, Y0; \
	VCVTDQ2PS Y1, Y1; \
	VCVTDQ2PS Y2, Y2; \
	VCVTDQ2PS Y3, Y3; \
	VPUNPCKLDQ Y1, Y0, Y10; \
	VPUNPCKHDQ Y1, Y0, Y11; \
	VPUNPCKLDQ Y3, Y2, Y12; \
	VPUNPCKHDQ Y3, Y2, Y13; \
	VPUNPCKLQDQ Y12, Y10, Y0; \
	VPUNPCKHQDQ Y12, Y10, Y1; \
	VPUNPCKLQDQ Y13, Y11, Y2; \
	VPUNPCKHQDQ Y13, Y11, Y3; \
	VMOVUPS X0, A+128(SP); \
	VMOVUPS X1, A+144(SP); \
	VMOVUPS X2, B+128(SP); \
	VMOVUPS X3, B+144(SP); \
	VEXTRACTF128 $1, Y0, C+128(SP); \
	VEXTRACTF128 $1, Y1, C+144(SP); \
	VEXTRACTF128 $1, Y2, D+128(SP); \
	VEXTRACTF128 $1, Y3, D+144(SP)

// G6K_D stores d of the four rows as float32 at 64(SP), read as words so
// that nothing past the 210-byte block is touched.
#define G6K_D \
	VPXOR X11, X11, X11; \
	VPINSRW $0, 208(DX), X11, X11; \
	VPINSRW $1, 208(DX)(R12*1), X11, X11; \
	VPINSRW $2, 208(DX)(R14*1), X11, X11; \
	VPINSRW $3, 208(DX)(R15*1), X11, X11; \
	VCVTPH2PS X11, X11; \
	VMOVUPS X11, 64(SP)

// G6K_Q stores row R's quants (0..63) of one half (ql at QL, qh at QL's
// 128+32h) for its four blocks to records A..D, at row offset RO: block k
// of the half takes the low (k = 0, 1) or high (2, 3) nibbles of ql's
// first (0, 2) or second (1, 3) 32 bytes, and bits 2k, 2k+1 of qh moved
// to bits 4, 5 (as dotQ6KGo). Y15 holds 0x0f bytes, Y14 0x30.
#define G6K_Q(QL, QH, R, RO, A, B, C, D) \
	VMOVDQU QL(DX)(R*1), Y10; \
	VMOVDQU QL+32(DX)(R*1), Y11; \
	VMOVDQU QH(DX)(R*1), Y12; \
	VPAND Y15, Y10, Y0; \
	VPSLLW $4, Y12, Y1; \
	VPAND Y14, Y1, Y1; \
	VPOR Y1, Y0, Y0; \
	VMOVDQU Y0, A+RO(SP); \
	VPAND Y15, Y11, Y0; \
	VPSLLW $2, Y12, Y1; \
	VPAND Y14, Y1, Y1; \
	VPOR Y1, Y0, Y0; \
	VMOVDQU Y0, B+RO(SP); \
	VPSRLW $4, Y10, Y0; \
	VPAND Y15, Y0, Y0; \
	VPAND Y14, Y12, Y1; \
	VPOR Y1, Y0, Y0; \
	VMOVDQU Y0, C+RO(SP); \
	VPSRLW $4, Y11, Y0; \
	VPAND Y15, Y0, Y0; \
	VPSRLW $2, Y12, Y1; \
	VPAND Y14, Y1, Y1; \
	VPOR Y1, Y0, Y0; \
	VMOVDQU Y0, D+RO(SP)

#define G6K_HALF(QL, QH, A, B, C, D) \
	G6K_Q(QL, QH, AX, 0, A, B, C, D); \
	G6K_Q(QL, QH, R12, 32, A, B, C, D); \
	G6K_Q(QL, QH, R14, 64, A, B, C, D); \
	G6K_Q(QL, QH, R15, 96, A, B, C, D)

// G6K_SUPER unpacks the four rows' superblock at DX into the frame's
// records (scales, d at 64(SP), quants) and prefetches the next four
// rows' share, for gemmQ6Kx8 and its VNNI twins.
#define G6K_SUPER \
	G6K_SC(192, 96, 256, 416, 576); \
	G6K_SC(200, 736, 896, 1056, 1216); \
	G6K_D; \
	VMOVDQU k4nib<>(SB), Y15; \
	VMOVDQU k4x30<>(SB), Y14; \
	XORQ AX, AX; \
	G6K_HALF(0, 128, 96, 256, 416, 576); \
	G6K_HALF(64, 160, 736, 896, 1056, 1216); \
	GK_PF14; \
	ADDQ $840, BX

// The sixteen-token VNNI kernels of Q4_K, Q5_K and Q6_K
// (gemm_q4k16_vnni_amd64.s, gemm_q5k16_vnni_amd64.s,
// gemm_q6k16_vnni_amd64.s): registers (zmm) Z0-Z3 and Z16-Z19 the rows'
// even and odd block sums, Z4-Z7 the float accumulators, Z9 X_g (then dx),
// Z10-Z13 the broadcast quants, Z14 the tokens' cvt(8·Σx); R8 group A's
// current block, R11 group B's, R9 the record.

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

// G8V_G is G16_G for one group of eight tokens in 256-bit registers (the
// eight-token VNNI kernels).
#define G8V_G(XO, WO, A0, A1, A2, A3) \
	VMOVDQU XO(R8), Y9; \
	VPBROADCASTD WO(R9), Y10; \
	VPBROADCASTD WO+32(R9), Y11; \
	VPBROADCASTD WO+64(R9), Y12; \
	VPBROADCASTD WO+96(R9), Y13; \
	VPDPBUSD Y9, Y10, A0; \
	VPDPBUSD Y9, Y11, A1; \
	VPDPBUSD Y9, Y12, A2; \
	VPDPBUSD Y9, Y13, A3

#define G16_EVEN(XO, WO) \
	G16_G(XO, WO, Z0, Z1, Z2, Z3)

#define G16_ODD(XO, WO) \
	G16_G(XO, WO, Z16, Z17, Z18, Z19)

// G16_ROW is the eight-token Q4_K/Q5_K row step on sixteen tokens: row R's block into ACC from the
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

// G16_OPEN starts a group of four rows of a sixteen-token kernel: the
// rows (QROWS, group A's activations in R8), group B's in R11, the
// accumulators Z4-Z7 cleared, DX at the rows' first block and CX the
// blocks.
#define G16_OPEN \
	QROWS(xa); \
	MOVQ xb+32(FP), R11; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	MOVQ SI, DX; \
	MOVQ nb+40(FP), CX

// G16_STORE spills a sixteen-token kernel's four rows (Z4-Z7) over the
// frame's records from 96(SP) and writes the ntok real tokens of the (up
// to four) real rows, then goes on to the next group of rows at GROUP or
// to DONE (G8_WRITE, whose labels ROWS, ROW and TOK it takes).
#define G16_STORE(GROUP, DONE, ROWS, ROW, TOK) \
	VMOVUPS Z4, 96(SP); \
	VMOVUPS Z5, 160(SP); \
	VMOVUPS Z6, 224(SP); \
	VMOVUPS Z7, 288(SP); \
	G8_WRITE(GROUP, DONE, ROWS, ROW, TOK, 96, 64, ntok+64, ostride+56)

// G16_KERNEL is the whole body of a sixteen-token VNNI kernel of Q4_K or
// Q5_K (arguments as gemmQ4Kx16VNNI's): SUPER unpacks the four rows'
// superblock at DX into the records and prefetches, SBYTES is the
// superblock's size. Per group of four rows it clears the accumulators,
// then per superblock takes d and dmin of the four rows and the eight
// blocks' groups (G16_EVEN, G16_ODD, G16_ROW), and at the end spills the
// sixteen tokens over the records for G8_WRITE.
#define G16_KERNEL(SUPER, SBYTES) \
	QENTRY(out+48, G16_NOCONST, done) \
group: \
	G16_OPEN; \
	SHRQ $3, CX; \
	JZ store \
super: \
	SUPER; \
	VBROADCASTSS 64(SP), Z20; \
	VBROADCASTSS 68(SP), Z21; \
	VBROADCASTSS 72(SP), Z22; \
	VBROADCASTSS 76(SP), Z23; \
	VBROADCASTSS 80(SP), Z24; \
	VBROADCASTSS 84(SP), Z25; \
	VBROADCASTSS 88(SP), Z26; \
	VBROADCASTSS 92(SP), Z27; \
	LEAQ 96(SP), R9; \
	MOVQ $8, R10; \
	PCALIGN $32 \
block: \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	G16_EVEN(64, 0); \
	G16_ODD(96, 4); \
	G16_EVEN(128, 8); \
	G16_ODD(160, 12); \
	G16_EVEN(192, 16); \
	G16_ODD(224, 20); \
	G16_EVEN(256, 24); \
	G16_ODD(288, 28); \
	VMOVUPS (R8), Y9; \
	VINSERTF64X4 $1, (R11), Z9, Z9; \
	VMOVDQU 32(R8), Y14; \
	VINSERTI64X4 $1, 32(R11), Z14, Z14; \
	VCVTDQ2PS Z14, Z14; \
	G16_ROW(Z0, Z16, Z20, Z24, Z10, Z4, 0); \
	G16_ROW(Z1, Z17, Z21, Z25, Z11, Z5, 1); \
	G16_ROW(Z2, Z18, Z22, Z26, Z12, Z6, 2); \
	G16_ROW(Z3, Z19, Z23, Z27, Z13, Z7, 3); \
	ADDQ $160, R9; \
	ADDQ $576, R8; \
	ADDQ $576, R11; \
	DECQ R10; \
	JNZ block; \
	ADDQ $SBYTES, DX; \
	DECQ CX; \
	JNZ super \
store: \
	G16_STORE(group, done, rows4, row, tok) \
done: \
	VZEROUPPER; \
	RET
