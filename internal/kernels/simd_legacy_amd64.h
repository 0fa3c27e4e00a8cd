// Shared by simd_q41_amd64.s and simd_q5_amd64.s (and the batched
// kernels, gemm_legacy_amd64.h): AVX2 kernels for Q4_1,
// Q5_0 and Q5_1 weights against Q8_0-quantised activations (36-byte
// blocks: a float32 scale, 32 int8 values). They reproduce dotLegacyGo bit
// for bit (order.go): integer sums are exact in any order, and per block
// the float operations are the scale products, exact converts and one
// fused multiply-add per term, in block order.
//
// The layout is simd_quant_amd64.s's: four rows at once (ROWOFFS clamps
// the offsets of a partial last four), each xmm accumulator holding one
// token's four rows, the rows' block decoded once into Y0-Y3 and reused by
// every token of the call, the next four rows prefetched one group ahead.
//
// Q5_0 runs exactly as Q4_0 does once its quants are unpacked to signed
// bytes q−16: the weights take the activations' signs (VPSIGNB) and meet
// |x| in VPMADDUBSW; its kernels use simd_amd64.h's SCALES and TOK_Q4 as
// simd_quant_amd64.s does. Q4_1 and Q5_1 keep their quants unsigned (0..15,
// 0..31), which is what VPMADDUBSW's first operand wants, against the
// signed activations; Σx comes from the same instruction against byte
// ones. Their d and m of the four rows share Y9 (d in the low lane, m in
// the high), so one broadcast of the token's scale and one multiply give
// both d·dx and m·dx.
//
// Fifth bits (Q5_0, Q5_1): qh is broadcast to every dword, VPSHUFB moves
// byte j/8 of it to byte j, and masking each byte with bit j%8 and comparing
// leaves 0xff where element j's fifth bit is set.
//
// Registers (ymm): Y0-Y3 the rows' quants, X4-X7 the accumulators of up
// to four tokens, Y8 int16 ones, Y9 the rows' scales, Y10 the token's |x|
// (Q5_0) or byte ones (Q4_1, Q5_1), Y11-Y15 temporaries. General: SI row
// 0 of the group, R12/R14/R15 the offsets of rows 1..3, DX the current
// block of row 0, R8-R11 each token's current activation block, CX the
// blocks left, R13 the rows left, DI the output, BX the prefetch pointer.

DATA lgNib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lgNib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lgNib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lgNib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL lgNib<>(SB), RODATA|NOPTR, $32

DATA lgOnes8<>+0(SB)/8, $0x0101010101010101
DATA lgOnes8<>+8(SB)/8, $0x0101010101010101
DATA lgOnes8<>+16(SB)/8, $0x0101010101010101
DATA lgOnes8<>+24(SB)/8, $0x0101010101010101
GLOBL lgOnes8<>(SB), RODATA|NOPTR, $32

// lgShuf sends byte j/8 of a dword to byte j (each lane holds the whole
// broadcast dword, so the high lane's 2s and 3s are in reach).
DATA lgShuf<>+0(SB)/8, $0x0000000000000000
DATA lgShuf<>+8(SB)/8, $0x0101010101010101
DATA lgShuf<>+16(SB)/8, $0x0202020202020202
DATA lgShuf<>+24(SB)/8, $0x0303030303030303
GLOBL lgShuf<>(SB), RODATA|NOPTR, $32

// lgBits is bit j%8 in byte j.
DATA lgBits<>+0(SB)/8, $0x8040201008040201
DATA lgBits<>+8(SB)/8, $0x8040201008040201
DATA lgBits<>+16(SB)/8, $0x8040201008040201
DATA lgBits<>+24(SB)/8, $0x8040201008040201
GLOBL lgBits<>(SB), RODATA|NOPTR, $32

// lgF0 is −16 as a byte: OR-ed onto a nibble it gives nibble−16, the
// Q5_0 value of a quant whose fifth bit is clear.
DATA lgF0<>+0(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA lgF0<>+8(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA lgF0<>+16(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA lgF0<>+24(SB)/8, $0xf0f0f0f0f0f0f0f0
GLOBL lgF0<>(SB), RODATA|NOPTR, $32

DATA lgX10<>+0(SB)/8, $0x1010101010101010
DATA lgX10<>+8(SB)/8, $0x1010101010101010
DATA lgX10<>+16(SB)/8, $0x1010101010101010
DATA lgX10<>+24(SB)/8, $0x1010101010101010
GLOBL lgX10<>(SB), RODATA|NOPTR, $32

// lgDMShuf gathers the float16 d (words 0, 2, 4, 6) then m (1, 3, 5, 7)
// of four rows' [d|m] dwords.
DATA lgDMShuf<>+0(SB)/8, $0x0d0c090805040100
DATA lgDMShuf<>+8(SB)/8, $0x0f0e0b0a07060302
GLOBL lgDMShuf<>(SB), RODATA|NOPTR, $16

// LG_CONST sets Y8 to int16 ones and Y10 to C10 (byte ones, or anything
// for Q5_0, whose TOK_Q4 overwrites it).
#define LG_CONST(C10) \
	MOVL $0x00010001, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8; \
	VMOVDQU C10, Y10

// LG_NIBS turns the 16 bytes at M into 32 quants in W: low nibbles are
// elements 0..15, high nibbles 16..31. X11 is scratch.
#define LG_NIBS(M, W, XW) \
	VMOVDQU M, XW; \
	VPSRLW $4, XW, X11; \
	VINSERTI128 $1, X11, W, W; \
	VPAND lgNib<>(SB), W, W

// LG_HIGH sets Y12 to 0xff in byte j where bit j of the dword at M is set.
#define LG_HIGH(M) \
	VPBROADCASTD M, Y12; \
	VPSHUFB lgShuf<>(SB), Y12, Y12; \
	VPAND lgBits<>(SB), Y12, Y12; \
	VPCMPEQB lgBits<>(SB), Y12, Y12

// LG_Q50 unpacks a Q5_0 block (qs at QS, qh at QH) into signed bytes
// q−16 in W: a set fifth bit leaves the nibble, a clear one makes it
// nibble−16.
#define LG_Q50(QS, QH, W, XW) \
	LG_NIBS(QS, W, XW); \
	LG_HIGH(QH); \
	VPANDN lgF0<>(SB), Y12, Y12; \
	VPOR Y12, W, W

// LG_Q51 unpacks a Q5_1 block (qs at QS, qh at QH) into quants 0..31.
#define LG_Q51(QS, QH, W, XW) \
	LG_NIBS(QS, W, XW); \
	LG_HIGH(QH); \
	VPAND lgX10<>(SB), Y12, Y12; \
	VPOR Y12, W, W

// WEIGHTS_Q41, WEIGHTS_Q50 and WEIGHTS_Q51 unpack the four rows' current
// blocks into Y0-Y3.
#define WEIGHTS_Q41 \
	LG_NIBS4(4)

// LG_NIBS4 unpacks the four rows' 16 bytes of nibbles at QS in the block
// into Y0-Y3 (Q4_1's, and Q4_0's for the eight-token kernel).
#define LG_NIBS4(QS) \
	LG_NIBS(QS(DX), Y0, X0); \
	LG_NIBS(QS(DX)(R12*1), Y1, X1); \
	LG_NIBS(QS(DX)(R14*1), Y2, X2); \
	LG_NIBS(QS(DX)(R15*1), Y3, X3)

#define WEIGHTS_Q50 \
	LG_Q50(6(DX), 2(DX), Y0, X0); \
	LG_Q50(6(DX)(R12*1), 2(DX)(R12*1), Y1, X1); \
	LG_Q50(6(DX)(R14*1), 2(DX)(R14*1), Y2, X2); \
	LG_Q50(6(DX)(R15*1), 2(DX)(R15*1), Y3, X3)

#define WEIGHTS_Q51 \
	WEIGHTS_Q5(8, 4)

// WEIGHTS_Q5 unpacks four rows of five-bit quants (qs at QS, qh at QH in
// the block) as quants 0..31: Q5_1's, and Q5_0's for the eight-token
// kernel, which takes the 16 off as 16·Σx (gemm_legacy_amd64.s).
#define WEIGHTS_Q5(QS, QH) \
	LG_Q51(QS(DX), QH(DX), Y0, X0); \
	LG_Q51(QS(DX)(R12*1), QH(DX)(R12*1), Y1, X1); \
	LG_Q51(QS(DX)(R14*1), QH(DX)(R14*1), Y2, X2); \
	LG_Q51(QS(DX)(R15*1), QH(DX)(R15*1), Y3, X3)

// LG_SCALESM loads d of the four rows into the low lane of Y9 and m into
// the high lane, as float32 (Q4_1, Q5_1; the batched kernels also take d
// of Q4_0 and Q5_0 this way, whose high lane then holds junk they never
// read).
#define LG_SCALESM \
	VMOVD (DX), X9; \
	VPINSRD $1, (DX)(R12*1), X9, X9; \
	VPINSRD $2, (DX)(R14*1), X9, X9; \
	VPINSRD $3, (DX)(R15*1), X9, X9; \
	VPSHUFB lgDMShuf<>(SB), X9, X9; \
	VCVTPH2PS X9, Y9

// LG_ROWU forms pair sums q·x of unsigned quants W against the token's x.
#define LG_ROWU(Rt, W, T) \
	VPMADDUBSW 4(Rt), W, T; \
	VPMADDWD Y8, T, T

// TOK_MIN adds one token's block (at Rt) of the four Q4_1 or Q5_1 rows
// into ACC: acc += (d·dx)·A, then acc += (m·dx)·B, B = Σx summed to every
// lane.
#define TOK_MIN(Rt, ACC) \
	LG_ROWU(Rt, Y0, Y11); \
	LG_ROWU(Rt, Y1, Y12); \
	LG_ROWU(Rt, Y2, Y13); \
	LG_ROWU(Rt, Y3, Y14); \
	SUM4S; \
	VPMADDUBSW 4(Rt), Y10, Y12; \
	VPMADDWD Y8, Y12, Y12; \
	VEXTRACTI128 $1, Y12, X13; \
	VPADDD X13, X12, X12; \
	VPSHUFD $0x4e, X12, X13; \
	VPADDD X13, X12, X12; \
	VPSHUFD $0xb1, X12, X13; \
	VPADDD X13, X12, X12; \
	VCVTDQ2PS X12, X12; \
	VBROADCASTSS (Rt), Y15; \
	VMULPS Y9, Y15, Y15; \
	VFMADD231PS X15, X11, ACC; \
	VEXTRACTF128 $1, Y15, X15; \
	VFMADD231PS X15, X12, ACC

// LG_PREFETCH fetches this block's share (at most 4·24 = 96 bytes) of the
// next four rows: two lines from BX, which moves on by STEP (an
// immediate).
#define LG_PREFETCH(STEP) \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	ADDQ STEP, BX

// LG_ENTRY1 and LG_ENTRY start a one-token kernel and a two- or four-token
// one (QENTRY) with the constants of LG_CONST(C10).
#define LG_ENTRY1(C10, DONE) \
	QENTRY(out+40, LG_CONST(C10), DONE)

#define LG_ENTRY(C10, DONE) \
	QENTRY(out+48, LG_CONST(C10), DONE)
