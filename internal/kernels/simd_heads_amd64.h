// Shared by simd_attn_amd64.s and simd_attn_f16_amd64.s: the bodies of
// the several-heads attention kernels (HeadScores, HeadAccum and their F16
// twins). The float32 and binary16 kernels run the same instructions in
// the same order except where they touch the key or value cache, so each
// body takes those steps as the names of macros the including file
// defines; the arithmetic on float32 lanes, and so every result's bits,
// is the same for both (VCVTPH2PS widens exactly).
//
// Registers: DI the output (out, or o), R8 q or w, DX hd, BX hd rounded
// down to the vector step, SI row 0 of the cache, R12 the row stride in
// bytes, R11 eight rows' bytes (the prefetch distance), R9 the per-head
// offsets, R13 rows left; per head R14 and R15 walk the head's output and
// q or w, R10 the head's slice of the cache row, CX the head, AX the
// element. The frames of the two kernels name their arguments the same
// way in both files, which lets these macros name them.

// HEAD_START loads the arguments the two bodies share (KV and OFF name the
// cache and offset arguments), sets BX to hd rounded down to STEP and
// R11, then opens the row loop ROW and the head loop HEAD: R10 is the
// head's slice of the row, ELEM bytes an element, and PREFETCH fetches the
// same slice eight rows ahead.
#define HEAD_START(KV, OFF, STEP, ELEM, PREFETCH, ROW, HEAD) \
	MOVQ KV+32(FP), SI; \
	MOVQ strideBytes+40(FP), R12; \
	MOVQ OFF+48(FP), R9; \
	MOVQ rows+64(FP), R13; \
	MOVQ DX, BX; \
	ANDQ $-STEP, BX; \
	LEAQ (R12*8), R11; \
ROW: \
	MOVQ DI, R14; \
	MOVQ R8, R15; \
	XORQ CX, CX; \
HEAD: \
	MOVLQSX (R9)(CX*4), AX; \
	LEAQ (SI)(AX*ELEM), R10; \
	PREFETCH

// HEAD_NEXT closes the loops HEAD_START opened: next head, else move OUT
// (the pointer that advances one float per row) and SI on by a row and
// start it, else return.
#define HEAD_NEXT(HEAD, ROW, OUT) \
	INCQ CX; \
	CMPQ CX, nh+56(FP); \
	JLT HEAD; \
	ADDQ $4, OUT; \
	ADDQ R12, SI; \
	DECQ R13; \
	JNZ ROW; \
	VZEROUPPER; \
	RET

// HEADSCORES is the body of headScoresAVX2 and headScoresF16AVX2: for each
// row and head, out[h][row] = Dot(q_h, key) in matF32x1's order (16 lanes
// with FMA, REDUCE16, then the tail one element at a time). The cache's
// steps: LOAD16 sets Y8 and Y9 to the sixteen keys at element AX of R10
// as float32; TAIL0 readies a tail, once, before its first LOAD1; LOAD1
// sets the low lane of K1 to the key at element AX.
#define HEADSCORES(ELEM, PREFETCH, LOAD16, TAIL0, LOAD1, K1) \
	MOVQ out+0(FP), DI; \
	MOVQ q+16(FP), R8; \
	MOVQ hd+24(FP), DX; \
	HEAD_START(k, koff, 16, ELEM, PREFETCH, hsrow, hshead); \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	XORQ AX, AX; \
	CMPQ AX, BX; \
	JGE hsreduce; \
	PCALIGN $32; \
hsloop: \
	LOAD16; \
	VFMADD231PS (R15)(AX*4), Y8, Y0; \
	VFMADD231PS 32(R15)(AX*4), Y9, Y1; \
	ADDQ $16, AX; \
	CMPQ AX, BX; \
	JLT hsloop; \
hsreduce: \
	REDUCE16(Y0, Y1, X0, X12); \
	CMPQ AX, DX; \
	JGE hsstore; \
	TAIL0; \
hstail: \
	LOAD1; \
	VFMADD231SS (R15)(AX*4), K1, X0; \
	INCQ AX; \
	CMPQ AX, DX; \
	JLT hstail; \
hsstore: \
	VMOVSS X0, (R14); \
	ADDQ outStrideBytes+8(FP), R14; \
	LEAQ (R15)(DX*4), R15; \
	HEAD_NEXT(hshead, hsrow, DI)

// HEADACCUM is the body of headAccumAVX2 and headAccumF16AVX2: for each
// row and head, o_h[j] += w[h][row] · value[j], the product rounded before
// the add (VMULPS then VADDPS), as axpyGo does. The cache's steps: MUL8
// sets Y8 to Y15 (the weight) times the eight values at element AX of
// R10; TAIL0 readies a tail, once, before its first MUL1; MUL1 sets X8 to
// X15 times the value at element AX.
#define HEADACCUM(ELEM, PREFETCH, MUL8, TAIL0, MUL1) \
	MOVQ o+0(FP), DI; \
	MOVQ hd+8(FP), DX; \
	MOVQ w+16(FP), R8; \
	HEAD_START(v, voff, 8, ELEM, PREFETCH, harow, hahead); \
	VBROADCASTSS (R15), Y15; \
	XORQ AX, AX; \
	CMPQ AX, BX; \
	JGE hatail0; \
	PCALIGN $32; \
haloop: \
	MUL8; \
	VADDPS (R14)(AX*4), Y8, Y8; \
	VMOVUPS Y8, (R14)(AX*4); \
	ADDQ $8, AX; \
	CMPQ AX, BX; \
	JLT haloop; \
hatail0: \
	CMPQ AX, DX; \
	JGE hanext; \
	TAIL0; \
hatail: \
	MUL1; \
	VADDSS (R14)(AX*4), X8, X8; \
	VMOVSS X8, (R14)(AX*4); \
	INCQ AX; \
	CMPQ AX, DX; \
	JLT hatail; \
hanext: \
	LEAQ (R14)(DX*4), R14; \
	ADDQ wStrideBytes+24(FP), R15; \
	HEAD_NEXT(hahead, harow, R8)
