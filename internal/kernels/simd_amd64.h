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
