// Macros shared by the AVX2 kernel files. Their arithmetic is fixed in
// order.go and reproduced by generic.go; see there before changing anything.

// REDUCE8 sums the 8 lanes of YA into the low lane of XA: upper half onto
// lower half, then lanes 2,3 onto 0,1, then lane 1 onto lane 0.
#define REDUCE8(YA, XA, XT) \
	VEXTRACTF128 $1, YA, XT; \
	VADDPS XT, XA, XA; \
	VMOVHLPS XA, XA, XT; \
	VADDPS XT, XA, XA; \
	VMOVSHDUP XA, XT; \
	VADDSS XT, XA, XA

#define REDUCE16(YA, YB, XA, XT) \
	VADDPS YB, YA, YA; \
	REDUCE8(YA, XA, XT)


// ROWOFFS sets R12, R14, R15 to the offsets of rows 1..3 from SI, clamped
// to the last of the R13 rows left. AX is scratch.
#define ROWOFFS \
	MOVQ rowBytes+8(FP), AX; \
	XORQ R12, R12; \
	CMPQ R13, $2; \
	CMOVQGE AX, R12; \
	MOVQ R12, R14; \
	LEAQ (AX)(AX*1), AX; \
	CMPQ R13, $3; \
	CMOVQGE AX, R14; \
	MOVQ R14, R15; \
	ADDQ rowBytes+8(FP), AX; \
	CMPQ R13, $4; \
	CMOVQGE AX, R15

// QENTRY starts a kernel of the four-row layout: weights in SI, rows left
// in R13, the output in DI (from the frame argument OUT: out+40 for a
// one-token kernel's frame, as quantX1's; out+48 for a two- or four-token
// one's, as quantX4's), then CONST (the kernel's constants, a macro); with
// no rows it jumps to DONE.
#define QENTRY(OUT, CONST, DONE) \
	MOVQ w+0(FP), SI; \
	MOVQ rows+16(FP), R13; \
	MOVQ OUT(FP), DI; \
	CONST; \
	TESTQ R13, R13; \
	JLE DONE

// QROWS opens a group of four rows: their offsets (ROWOFFS), BX the
// prefetch pointer one group ahead, and R8 the first token's activations
// from the frame argument XARG (xb, or xi for the eight-token kernels).
#define QROWS(XARG) \
	ROWOFFS; \
	MOVQ rowBytes+8(FP), AX; \
	LEAQ (SI)(AX*4), BX; \
	MOVQ XARG+24(FP), R8

// QTOKS2 and QTOKS4 point R9.. at the other tokens' activations (xstride
// apart) and zero the tokens' accumulators X4...
#define QTOKS2 \
	MOVQ xstride+32(FP), CX; \
	LEAQ (R8)(CX*1), R9; \
	VXORPS X4, X4, X4; \
	VXORPS X5, X5, X5

#define QTOKS4 \
	MOVQ xstride+32(FP), CX; \
	LEAQ (R8)(CX*1), R9; \
	LEAQ (R9)(CX*1), R10; \
	LEAQ (R10)(CX*1), R11; \
	VXORPS X4, X4, X4; \
	VXORPS X5, X5, X5; \
	VXORPS X6, X6, X6; \
	VXORPS X7, X7, X7

// QBLOCKS sets DX to the group's first block and CX to the block count
// (the frame argument NB, nb+32 or nb+40); with none it jumps to REDUCE.
#define QBLOCKS(NB, REDUCE) \
	MOVQ SI, DX; \
	MOVQ NB(FP), CX; \
	TESTQ CX, CX; \
	JZ REDUCE

// QGROUP1, QGROUP2 and QGROUP4 start a group of four rows for one, two
// or four tokens: QROWS, the tokens' pointers and zeroed accumulators,
// then BLOCKS(NB, REDUCE), a macro that sets up the loop: QBLOCKS for a
// loop over 32-element blocks, KX_SUPERS for one over superblocks.
#define QGROUP1(BLOCKS, REDUCE) \
	QROWS(xb); \
	VXORPS X4, X4, X4; \
	BLOCKS(nb+32, REDUCE)

#define QGROUP2(BLOCKS, REDUCE) \
	QROWS(xb); \
	QTOKS2; \
	BLOCKS(nb+40, REDUCE)

#define QGROUP4(BLOCKS, REDUCE) \
	QROWS(xb); \
	QTOKS4; \
	BLOCKS(nb+40, REDUCE)

// SCALES loads the four rows' float16 block scales (the first two bytes
// of each row's block at DX) into X9 as float32. The first load writes the
// whole register (the two bytes after the scale are in the block, in
// bounds): inserting into the old Y9 instead would chain every block's
// scales to the last block's and serialise the loop on that chain.
#define SCALES \
	VMOVD (DX), X9; \
	VPINSRW $1, (DX)(R12*1), X9, X9; \
	VPINSRW $2, (DX)(R14*1), X9, X9; \
	VPINSRW $3, (DX)(R15*1), X9, X9; \
	VCVTPH2PS X9, X9

// SUM4 reduces the four rows' dword lane sums in Y11-Y14 to Y11: low lane
// the sums of rows 0..3 over the block's first 16 elements, high lane over
// the last 16. Unpacks and adds are single micro-ops where VPHADDD is
// several: measured, this is about 10% faster than three VPHADDDs. Y13 and
// Y15 are clobbered.
#define SUM4 \
	VPUNPCKLDQ Y12, Y11, Y15; \
	VPUNPCKHDQ Y12, Y11, Y11; \
	VPADDD Y15, Y11, Y11; \
	VPUNPCKLDQ Y14, Y13, Y15; \
	VPUNPCKHDQ Y14, Y13, Y13; \
	VPADDD Y15, Y13, Y13; \
	VPUNPCKLQDQ Y13, Y11, Y15; \
	VPUNPCKHQDQ Y13, Y11, Y11; \
	VPADDD Y15, Y11, Y11

// SUM4S is SUM4 with the lanes added: X11 holds the block sums S of rows
// 0..3, converted to float32 (exact: |S| < 2^24).
#define SUM4S \
	SUM4; \
	VEXTRACTI128 $1, Y11, X15; \
	VPADDD X15, X11, X11; \
	VCVTDQ2PS X11, X11

// FINISH reduces the four rows' lane sums (Y11-Y14) to S of rows 0..3 and
// adds (d·dx)·S into ACC (an xmm register: one float per row), d the rows'
// scales in X9, dx the token's scale at Rt.
#define FINISH(Rt, ACC) \
	SUM4S; \
	VBROADCASTSS (Rt), X15; \
	VMULPS X9, X15, X15; \
	VFMADD231PS X15, X11, ACC

// ROW_Q4 forms the pair sums w·x of signed weights W (|w| ≤ 16) against
// the token's x (at M), as dword lane sums in T: w negated where x is
// negative, times |x| (Y10).
#define ROW_Q4(M, W, T) \
	VPSIGNB M, W, T; \
	VPMADDUBSW T, Y10, T; \
	VPMADDWD Y8, T, T

// TOK_Q4 accumulates one token's block (at Rt) against the four rows of
// signed weights in Y0-Y3 (Q4_0, or Q5_0 unpacked to q−16) into ACC.
#define TOK_Q4(Rt, ACC) \
	VPABSB 4(Rt), Y10; \
	ROW_Q4(4(Rt), Y0, Y11); \
	ROW_Q4(4(Rt), Y1, Y12); \
	ROW_Q4(4(Rt), Y2, Y13); \
	ROW_Q4(4(Rt), Y3, Y14); \
	FINISH(Rt, ACC)

// PARTIAL1, PARTIAL2 and PARTIAL4 store the results of a partial last
// group of R13 < 4 rows, for one token (X4, at DI), two (X4 and X5, at DI
// and DI+AX) or four (X4..X7, at DI, DI+AX, CX and CX+AX), and jump to
// DONE once R13 rows are stored.
#define PARTIAL1(DONE) \
	VMOVSS X4, (DI); \
	CMPQ R13, $2; \
	JLT DONE; \
	VEXTRACTPS $1, X4, 4(DI); \
	CMPQ R13, $3; \
	JLT DONE; \
	VEXTRACTPS $2, X4, 8(DI)

#define PARTIAL2(DONE) \
	VMOVSS X4, (DI); \
	VMOVSS X5, (DI)(AX*1); \
	CMPQ R13, $2; \
	JLT DONE; \
	VEXTRACTPS $1, X4, 4(DI); \
	VEXTRACTPS $1, X5, 4(DI)(AX*1); \
	CMPQ R13, $3; \
	JLT DONE; \
	VEXTRACTPS $2, X4, 8(DI); \
	VEXTRACTPS $2, X5, 8(DI)(AX*1)

#define PARTIAL4(DONE) \
	VMOVSS X4, (DI); \
	VMOVSS X5, (DI)(AX*1); \
	VMOVSS X6, (CX); \
	VMOVSS X7, (CX)(AX*1); \
	CMPQ R13, $2; \
	JLT DONE; \
	VEXTRACTPS $1, X4, 4(DI); \
	VEXTRACTPS $1, X5, 4(DI)(AX*1); \
	VEXTRACTPS $1, X6, 4(CX); \
	VEXTRACTPS $1, X7, 4(CX)(AX*1); \
	CMPQ R13, $3; \
	JLT DONE; \
	VEXTRACTPS $2, X4, 8(DI); \
	VEXTRACTPS $2, X5, 8(DI)(AX*1); \
	VEXTRACTPS $2, X6, 8(CX); \
	VEXTRACTPS $2, X7, 8(CX)(AX*1)

// NEXT4 moves DI and SI on by four rows and loops to GROUP while rows are
// left, else jumps to DONE.
#define NEXT4(GROUP, DONE) \
	ADDQ $16, DI; \
	MOVQ rowBytes+8(FP), AX; \
	LEAQ (SI)(AX*4), SI; \
	SUBQ $4, R13; \
	JNZ GROUP; \
	JMP DONE

// STORE1, STORE2 and STORE4 end a group of four rows of the one-, two- and
// four-token quantised kernels (argument frames as quantX1 and quantX4):
// with four rows left they store the tokens' results (X4.., at DI, DI+AX,
// CX, CX+AX) and move to the next group (or to DONE after the last); with
// fewer they jump to PARTIAL, AX and CX set for PARTIAL1/2/4.
#define STORE1(GROUP, PARTIAL, DONE) \
	CMPQ R13, $4; \
	JLT PARTIAL; \
	VMOVUPS X4, (DI); \
	NEXT4(GROUP, DONE)

#define STORE2(GROUP, PARTIAL, DONE) \
	MOVQ ostride+56(FP), AX; \
	CMPQ R13, $4; \
	JLT PARTIAL; \
	VMOVUPS X4, (DI); \
	VMOVUPS X5, (DI)(AX*1); \
	NEXT4(GROUP, DONE)

#define STORE4(GROUP, PARTIAL, DONE) \
	MOVQ ostride+56(FP), AX; \
	LEAQ (DI)(AX*2), CX; \
	CMPQ R13, $4; \
	JLT PARTIAL; \
	VMOVUPS X4, (DI); \
	VMOVUPS X5, (DI)(AX*1); \
	VMOVUPS X6, (CX); \
	VMOVUPS X7, (CX)(AX*1); \
	NEXT4(GROUP, DONE)

// The four-stream kernels' steps (matQ8x1s and matQ8x2s, and their VNNI
// twins): see simd_quant_amd64.s.

// SOFFS sets R12, R14 and R15 to one, two and three times the frame
// argument STRIDE.
#define SOFFS(STRIDE) \
	MOVQ STRIDE(FP), R12; \
	LEAQ (R12)(R12*1), R14; \
	LEAQ (R14)(R12*1), R15

// SCATTER stores the four rows' results in XR at P, P+AX, P+2AX and
// P+3AX. DX is clobbered.
#define SCATTER(XR, P) \
	VMOVSS XR, (P); \
	VEXTRACTPS $1, XR, (P)(AX*1); \
	VEXTRACTPS $2, XR, (P)(AX*2); \
	LEAQ (P)(AX*2), DX; \
	VEXTRACTPS $3, XR, (DX)(AX*1)

// SNEXT sets AX for SCATTER before the stores; SLOOP moves SI and DI on by
// one row after them and loops to GROUP while groups are left.
#define SNEXT \
	MOVQ rows+16(FP), AX; \
	SHLQ $2, AX

#define SLOOP(GROUP) \
	ADDQ $4, DI; \
	ADDQ rowBytes+8(FP), SI; \
	DECQ R13; \
	JNZ GROUP

// S1_KERNEL and S2_KERNEL are the whole bodies of the four-stream
// kernels for one token (matQ8x1s and its VNNI twin) and two
// (matQ8x2s and its twin): CONST sets the kernel's constants (QENTRY);
// STEP takes one block of the four streams (DX the block of stream 0) for
// the token at R8 into X4, and for two also the token at R9 into X5. The
// one-token body prefetches non-temporally (simd_quant_amd64.s says why).
#define S1_KERNEL(CONST, STEP) \
	QENTRY(out+40, CONST, done); \
	SOFFS(stride+48); \
group: \
	MOVQ xb+24(FP), R8; \
	VXORPS X4, X4, X4; \
	QBLOCKS(nb+32, reduce); \
	PCALIGN $32; \
block: \
	PREFETCHNTA 512(DX); \
	PREFETCHNTA 512(DX)(R12*1); \
	PREFETCHNTA 512(DX)(R14*1); \
	PREFETCHNTA 512(DX)(R15*1); \
	STEP; \
	ADDQ $34, DX; \
	ADDQ $36, R8; \
	DECQ CX; \
	JNZ block; \
reduce: \
	SNEXT; \
	SCATTER(X4, DI); \
	SLOOP(group); \
done: \
	VZEROUPPER; \
	RET

#define S2_KERNEL(CONST, STEP) \
	QENTRY(out+48, CONST, done); \
	SOFFS(stride+64); \
group: \
	MOVQ xb+24(FP), R8; \
	QTOKS2; \
	QBLOCKS(nb+40, reduce); \
	PCALIGN $32; \
block: \
	STEP; \
	ADDQ $34, DX; \
	ADDQ $36, R8; \
	ADDQ $36, R9; \
	DECQ CX; \
	JNZ block; \
reduce: \
	SNEXT; \
	SCATTER(X4, DI); \
	MOVQ ostride+56(FP), BX; \
	ADDQ DI, BX; \
	SCATTER(X5, BX); \
	SLOOP(group); \
done: \
	VZEROUPPER; \
	RET

// G8_WRITE ends a group of four rows of the eight- and sixteen-token
// kernels: it writes out[t*ostride/4 + r] for the (up to four) real rows
// and the ntok real tokens (frame arguments NTOK and OSTRIDE) from their
// spill at BASE(SP), row r's tokens STRIDE bytes after row r-1's, then
// moves SI and DI to the next four rows (rowBytes+8(FP) apart, the same
// offset in every such kernel's frame) and jumps to LOOP, or to DONE
// after the last. ROWS, ROW and TOK name its labels. AX, BX, CX, DX and
// R8-R11 are clobbered.
#define G8_WRITE(LOOP, DONE, ROWS, ROW, TOK, BASE, STRIDE, NTOK, OSTRIDE) \
	MOVQ NTOK(FP), R9; \
	MOVQ OSTRIDE(FP), R10; \
	MOVQ R13, R11; \
	CMPQ R11, $4; \
	JLE ROWS; \
	MOVQ $4, R11; \
ROWS: \
	LEAQ BASE(SP), BX; \
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
	ADDQ $STRIDE, BX; \
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

// Q1_KERNEL, Q2_KERNEL and Q4T_KERNEL are the whole bodies of the
// adjacent four-row kernels of Q8_0 and Q4_0 for one token (matQ8x1,
// matQ4x1 and their VNNI twins), two (matQ8x2, matQ4x2 and twins) and
// four (matQ4x4 and its twin): CONST sets the kernel's constants
// (QENTRY), HEAD loads the four rows' block at DX (scales and weights),
// TOK(Rt, ACC) adds one token's block into its accumulator, NEXTPF
// prefetches the next group's share of the block (after the first
// token) and BB is the block's size in bytes (an immediate).
#define Q1_KERNEL(CONST, HEAD, TOK, NEXTPF, BB) \
	QENTRY(out+40, CONST, done); \
group: \
	QGROUP1(QBLOCKS, reduce); \
	PCALIGN $32; \
block: \
	HEAD; \
	TOK(R8, X4); \
	NEXTPF; \
	ADDQ BB, DX; \
	ADDQ $36, R8; \
	DECQ CX; \
	JNZ block; \
reduce: \
	STORE1(group, partial, done); \
partial: \
	PARTIAL1(done); \
done: \
	VZEROUPPER; \
	RET

#define Q2_KERNEL(CONST, HEAD, TOK, NEXTPF, BB) \
	QENTRY(out+48, CONST, done); \
group: \
	QGROUP2(QBLOCKS, reduce); \
	PCALIGN $32; \
block: \
	HEAD; \
	TOK(R8, X4); \
	NEXTPF; \
	TOK(R9, X5); \
	ADDQ BB, DX; \
	ADDQ $36, R8; \
	ADDQ $36, R9; \
	DECQ CX; \
	JNZ block; \
reduce: \
	STORE2(group, partial, done); \
partial: \
	PARTIAL2(done); \
done: \
	VZEROUPPER; \
	RET

#define Q4T_KERNEL(CONST, HEAD, TOK, NEXTPF, BB) \
	QENTRY(out+48, CONST, done); \
group: \
	QGROUP4(QBLOCKS, reduce); \
	PCALIGN $32; \
block: \
	HEAD; \
	TOK(R8, X4); \
	NEXTPF; \
	TOK(R9, X5); \
	TOK(R10, X6); \
	TOK(R11, X7); \
	ADDQ BB, DX; \
	ADDQ $36, R8; \
	ADDQ $36, R9; \
	ADDQ $36, R10; \
	ADDQ $36, R11; \
	DECQ CX; \
	JNZ block; \
reduce: \
	STORE4(group, partial, done); \
partial: \
	PARTIAL4(done); \
done: \
	VZEROUPPER; \
	RET

// Q4_NEXTPF fetches the next four rows' share (4·18 bytes) of a Q4_0
// block, one group ahead (BX).
#define Q4_NEXTPF \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	ADDQ $72, BX

// Q_NEXTPF fetches the next four rows' share (4·34 bytes) of a Q8_0 block,
// one group ahead (BX).
#define Q_NEXTPF \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	ADDQ $136, BX
