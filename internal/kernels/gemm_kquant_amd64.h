// Shared by the eight-token K-quant kernels (gemm_kquant_amd64.s,
// gemm_q5k_amd64.s) and the legacy ones (gemm_legacy_amd64.s).

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
	MOVQ ntok+56(FP), R9; \
	MOVQ ostride+48(FP), R10; \
	MOVQ R13, R11; \
	CMPQ R11, $4; \
	JLE ROWS; \
	MOVQ $4, R11; \
ROWS: \
	LEAQ 96(SP), BX; \
	MOVQ DI, R8; \
ROW: \
	MOVQ R8, DX; \
	XORQ CX, CX; \
TOK: \
	MOVL (BX)(CX*4), AX; \
	MOVL AX, (DX); \
	ADDQ R10, DX; \
	INCQ CX; \
	CMPQ CX, R9; \
	JLT TOK; \
	ADDQ $32, BX; \
	ADDQ $4, R8; \
	DECQ R11; \
	JNZ ROW; \
	CMPQ R13, $4; \
	JLE DONE; \
	ADDQ $16, DI; \
	MOVQ rowBytes+8(FP), AX; \
	LEAQ (SI)(AX*4), SI; \
	SUBQ $4, R13; \
	JMP LOOP

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
