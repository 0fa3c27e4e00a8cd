//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"

// AVX2+FMA+F16C kernels for F32, F16 and BF16 weights.

// Weight loads for the plain types: 16 elements at index AX into Y8, Y9,
// or one element into X8.
#define LOAD16_F32 \
	VMOVUPS (SI)(AX*4), Y8; \
	VMOVUPS 32(SI)(AX*4), Y9
#define LOAD1_F32 \
	VMOVSS (SI)(AX*4), X8

#define LOAD16_F16 \
	VCVTPH2PS (SI)(AX*2), Y8; \
	VCVTPH2PS 16(SI)(AX*2), Y9
#define LOAD1_F16 \
	MOVWLZX (SI)(AX*2), R9; \
	VMOVD R9, X8; \
	VCVTPH2PS X8, X8

#define LOAD16_BF16 \
	VPMOVZXWD (SI)(AX*2), Y8; \
	VPMOVZXWD 16(SI)(AX*2), Y9; \
	VPSLLD $16, Y8, Y8; \
	VPSLLD $16, Y9, Y9
#define LOAD1_BF16 \
	MOVWLZX (SI)(AX*2), R9; \
	SHLL $16, R9; \
	VMOVD R9, X8

// matF32x1s, matF16x1s and matBF16x1s are matF32x1, matF16x1 and
// matBF16x1 for 4*rows rows read as four streams of rows rows, stride bytes
// apart, one row of each at a time (rows g, rows+g, 2rows+g, 3rows+g; the
// results to out, out+rows, out+2rows, out+3rows), for cols a multiple of
// 16. As with matQ8x1s (simd_quant_amd64.s), four far-apart streams are
// what the hardware prefetcher follows best. Each row has the one-row
// kernel's two accumulators (Y0/Y1 for stream 0, Y2/Y3, Y4/Y5, Y6/Y7), the
// same products in the same order and REDUCE16, so the same bits; x's
// sixteen floats are loaded once for the four rows.
//
// STRIDED_X1 is the body, STEP a macro adding the four rows' sixteen
// products at element AX into the accumulators (x's in Y8 and Y9; Y10 and
// Y11 scratch). The weights are the multiply's first source, as in the
// one-row kernels: the products are the same either way round, but where
// both factors are NaN the first source's payload is the one that
// survives, and a row's bits must not depend on the kernel; R12, R14, R15 the offsets of streams 1..3, R9 the bytes
// between two streams' results.
#define STRIDED_X1(STEP, ROW, LOOP, REDUCE, DONE) \
	MOVQ w+0(FP), SI; \
	MOVQ rows+16(FP), R13; \
	MOVQ x+24(FP), R8; \
	MOVQ cols+32(FP), BX; \
	MOVQ out+40(FP), DI; \
	MOVQ stride+48(FP), R12; \
	LEAQ (R12)(R12*1), R14; \
	LEAQ (R14)(R12*1), R15; \
	MOVQ R13, R9; \
	SHLQ $2, R9; \
	TESTQ R13, R13; \
	JLE DONE; \
ROW: \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	XORQ AX, AX; \
	TESTQ BX, BX; \
	JZ REDUCE; \
LOOP: \
	VMOVUPS (R8)(AX*4), Y8; \
	VMOVUPS 32(R8)(AX*4), Y9; \
	STEP; \
	ADDQ $16, AX; \
	CMPQ AX, BX; \
	JLT LOOP; \
REDUCE: \
	REDUCE16(Y0, Y1, X0, X10); \
	VMOVSS X0, (DI); \
	REDUCE16(Y2, Y3, X2, X10); \
	VMOVSS X2, (DI)(R9*1); \
	REDUCE16(Y4, Y5, X4, X10); \
	VMOVSS X4, (DI)(R9*2); \
	REDUCE16(Y6, Y7, X6, X10); \
	LEAQ (DI)(R9*2), DX; \
	VMOVSS X6, (DX)(R9*1); \
	ADDQ $4, DI; \
	ADDQ rowBytes+8(FP), SI; \
	DECQ R13; \
	JNZ ROW; \
DONE: \
	VZEROUPPER; \
	RET

// STEP4 is a STEP: the four rows' weights at element AX (ELEM bytes each,
// the second eight HALF bytes on), loaded as float32 by LD (LD_F32,
// LD_F16 or BF16), times x.
#define STEP4(LD, ELEM, HALF) \
	LEAQ (SI)(AX*ELEM), DX; \
	STEP4_AT(LD, HALF)

// STEP4N is STEP4 that also asks, with PREFETCHNTA, for each stream 512
// bytes ahead: for the one-token product, whose weights are read once a
// step, so that they do not push out of L3 the KV cache and activations
// attention reads between two products (see matQ8x1s).
#define STEP4N(LD, ELEM, HALF) \
	LEAQ (SI)(AX*ELEM), DX; \
	PREFETCHNTA 512(DX); \
	PREFETCHNTA 512(DX)(R12*1); \
	PREFETCHNTA 512(DX)(R14*1); \
	PREFETCHNTA 512(DX)(R15*1); \
	STEP4_AT(LD, HALF)

// STEP4_AT is STEP4 with DX at the four rows' element AX of stream 0.
#define STEP4_AT(LD, HALF) \
	LD((DX), Y10); \
	VFMADD231PS Y8, Y10, Y0; \
	LD(HALF(DX), Y11); \
	VFMADD231PS Y9, Y11, Y1; \
	LD((DX)(R12*1), Y10); \
	VFMADD231PS Y8, Y10, Y2; \
	LD(HALF(DX)(R12*1), Y11); \
	VFMADD231PS Y9, Y11, Y3; \
	LD((DX)(R14*1), Y10); \
	VFMADD231PS Y8, Y10, Y4; \
	LD(HALF(DX)(R14*1), Y11); \
	VFMADD231PS Y9, Y11, Y5; \
	LD((DX)(R15*1), Y10); \
	VFMADD231PS Y8, Y10, Y6; \
	LD(HALF(DX)(R15*1), Y11); \
	VFMADD231PS Y9, Y11, Y7

#define LD_F32(M, T) VMOVUPS M, T
#define LD_F16(M, T) VCVTPH2PS M, T

#define BF16(M, T) \
	VPMOVZXWD M, T; \
	VPSLLD $16, T, T

#define STEP_F32 STEP4(LD_F32, 4, 32)
#define STEP_F16 STEP4(LD_F16, 2, 16)
#define STEP_BF16 STEP4(BF16, 2, 16)
#define STEP_F16N STEP4N(LD_F16, 2, 16)
#define STEP_BF16N STEP4N(BF16, 2, 16)

// func matF32x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)
TEXT ·matF32x1(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ cols+32(FP), DX
	MOVQ out+40(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ F32x1done

F32x1row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX
	CMPQ AX, BX
	JGE F32x1reduce

	PCALIGN $32
F32x1loop:
	LOAD16_F32
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	ADDQ $16, AX
	CMPQ AX, BX
	JLT F32x1loop

F32x1reduce:
	REDUCE16(Y0, Y1, X0, X12)
	CMPQ AX, DX
	JGE F32x1store

F32x1tail:
	LOAD1_F32
	VFMADD231SS (R8)(AX*4), X8, X0
	INCQ AX
	CMPQ AX, DX
	JLT F32x1tail

F32x1store:
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ F32x1row

F32x1done:
	VZEROUPPER
	RET

// func matF32x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)
TEXT ·matF32x4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	LEAQ (R11)(CX*1), CX
	MOVQ cols+40(FP), DX
	MOVQ out+48(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ F32x4done

F32x4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	CMPQ AX, BX
	JGE F32x4reduce

	PCALIGN $32
F32x4loop:
	LOAD16_F32
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS 32(R10)(AX*4), Y9, Y3
	VFMADD231PS (R11)(AX*4), Y8, Y4
	VFMADD231PS 32(R11)(AX*4), Y9, Y5
	VFMADD231PS (CX)(AX*4), Y8, Y6
	VFMADD231PS 32(CX)(AX*4), Y9, Y7
	ADDQ $16, AX
	CMPQ AX, BX
	JLT F32x4loop

F32x4reduce:
	REDUCE16(Y0, Y1, X0, X12)
	REDUCE16(Y2, Y3, X2, X13)
	REDUCE16(Y4, Y5, X4, X14)
	REDUCE16(Y6, Y7, X6, X15)
	CMPQ AX, DX
	JGE F32x4store

F32x4tail:
	LOAD1_F32
	VFMADD231SS (R8)(AX*4), X8, X0
	VFMADD231SS (R10)(AX*4), X8, X2
	VFMADD231SS (R11)(AX*4), X8, X4
	VFMADD231SS (CX)(AX*4), X8, X6
	INCQ AX
	CMPQ AX, DX
	JLT F32x4tail

F32x4store:
	MOVQ ostride+56(FP), AX
	VMOVSS X0, (DI)
	VMOVSS X2, (DI)(AX*1)
	VMOVSS X4, (DI)(AX*2)
	LEAQ (DI)(AX*2), R9
	VMOVSS X6, (R9)(AX*1)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ F32x4row

F32x4done:
	VZEROUPPER
	RET

// func matF16x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)
TEXT ·matF16x1(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ cols+32(FP), DX
	MOVQ out+40(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ F16x1done

F16x1row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX
	CMPQ AX, BX
	JGE F16x1reduce

	PCALIGN $32
F16x1loop:
	LOAD16_F16
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	ADDQ $16, AX
	CMPQ AX, BX
	JLT F16x1loop

F16x1reduce:
	REDUCE16(Y0, Y1, X0, X12)
	CMPQ AX, DX
	JGE F16x1store

F16x1tail:
	LOAD1_F16
	VFMADD231SS (R8)(AX*4), X8, X0
	INCQ AX
	CMPQ AX, DX
	JLT F16x1tail

F16x1store:
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ F16x1row

F16x1done:
	VZEROUPPER
	RET

// func matF16x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)
TEXT ·matF16x4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	LEAQ (R11)(CX*1), CX
	MOVQ cols+40(FP), DX
	MOVQ out+48(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ F16x4done

F16x4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	CMPQ AX, BX
	JGE F16x4reduce

	PCALIGN $32
F16x4loop:
	LOAD16_F16
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS 32(R10)(AX*4), Y9, Y3
	VFMADD231PS (R11)(AX*4), Y8, Y4
	VFMADD231PS 32(R11)(AX*4), Y9, Y5
	VFMADD231PS (CX)(AX*4), Y8, Y6
	VFMADD231PS 32(CX)(AX*4), Y9, Y7
	ADDQ $16, AX
	CMPQ AX, BX
	JLT F16x4loop

F16x4reduce:
	REDUCE16(Y0, Y1, X0, X12)
	REDUCE16(Y2, Y3, X2, X13)
	REDUCE16(Y4, Y5, X4, X14)
	REDUCE16(Y6, Y7, X6, X15)
	CMPQ AX, DX
	JGE F16x4store

F16x4tail:
	LOAD1_F16
	VFMADD231SS (R8)(AX*4), X8, X0
	VFMADD231SS (R10)(AX*4), X8, X2
	VFMADD231SS (R11)(AX*4), X8, X4
	VFMADD231SS (CX)(AX*4), X8, X6
	INCQ AX
	CMPQ AX, DX
	JLT F16x4tail

F16x4store:
	MOVQ ostride+56(FP), AX
	VMOVSS X0, (DI)
	VMOVSS X2, (DI)(AX*1)
	VMOVSS X4, (DI)(AX*2)
	LEAQ (DI)(AX*2), R9
	VMOVSS X6, (R9)(AX*1)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ F16x4row

F16x4done:
	VZEROUPPER
	RET

// func matBF16x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)
TEXT ·matBF16x1(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ cols+32(FP), DX
	MOVQ out+40(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ BF16x1done

BF16x1row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX
	CMPQ AX, BX
	JGE BF16x1reduce

	PCALIGN $32
BF16x1loop:
	LOAD16_BF16
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	ADDQ $16, AX
	CMPQ AX, BX
	JLT BF16x1loop

BF16x1reduce:
	REDUCE16(Y0, Y1, X0, X12)
	CMPQ AX, DX
	JGE BF16x1store

BF16x1tail:
	LOAD1_BF16
	VFMADD231SS (R8)(AX*4), X8, X0
	INCQ AX
	CMPQ AX, DX
	JLT BF16x1tail

BF16x1store:
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ BF16x1row

BF16x1done:
	VZEROUPPER
	RET

// func matBF16x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)
TEXT ·matBF16x4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ x+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	LEAQ (R11)(CX*1), CX
	MOVQ cols+40(FP), DX
	MOVQ out+48(FP), DI
	MOVQ DX, BX
	ANDQ $-16, BX
	TESTQ R13, R13
	JZ BF16x4done

BF16x4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	CMPQ AX, BX
	JGE BF16x4reduce

	PCALIGN $32
BF16x4loop:
	LOAD16_BF16
	VFMADD231PS (R8)(AX*4), Y8, Y0
	VFMADD231PS 32(R8)(AX*4), Y9, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS 32(R10)(AX*4), Y9, Y3
	VFMADD231PS (R11)(AX*4), Y8, Y4
	VFMADD231PS 32(R11)(AX*4), Y9, Y5
	VFMADD231PS (CX)(AX*4), Y8, Y6
	VFMADD231PS 32(CX)(AX*4), Y9, Y7
	ADDQ $16, AX
	CMPQ AX, BX
	JLT BF16x4loop

BF16x4reduce:
	REDUCE16(Y0, Y1, X0, X12)
	REDUCE16(Y2, Y3, X2, X13)
	REDUCE16(Y4, Y5, X4, X14)
	REDUCE16(Y6, Y7, X6, X15)
	CMPQ AX, DX
	JGE BF16x4store

BF16x4tail:
	LOAD1_BF16
	VFMADD231SS (R8)(AX*4), X8, X0
	VFMADD231SS (R10)(AX*4), X8, X2
	VFMADD231SS (R11)(AX*4), X8, X4
	VFMADD231SS (CX)(AX*4), X8, X6
	INCQ AX
	CMPQ AX, DX
	JLT BF16x4tail

BF16x4store:
	MOVQ ostride+56(FP), AX
	VMOVSS X0, (DI)
	VMOVSS X2, (DI)(AX*1)
	VMOVSS X4, (DI)(AX*2)
	LEAQ (DI)(AX*2), R9
	VMOVSS X6, (R9)(AX*1)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ BF16x4row

BF16x4done:
	VZEROUPPER
	RET

// func fmaAsm(a, b, c float32) float32
TEXT ·fmaAsm(SB), NOSPLIT, $0-20
	VMOVSS a+0(FP), X0
	VMOVSS b+4(FP), X1
	VMOVSS c+8(FP), X2
	VFMADD231SS X1, X0, X2
	VMOVSS X2, ret+16(FP)
	RET

// func matF32x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
TEXT ·matF32x1s(SB), NOSPLIT, $0-56
	STRIDED_X1(STEP_F32, row, loop, reduce, done)

// func matF16x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
TEXT ·matF16x1s(SB), NOSPLIT, $0-56
	STRIDED_X1(STEP_F16, row, loop, reduce, done)

// func matBF16x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
TEXT ·matBF16x1s(SB), NOSPLIT, $0-56
	STRIDED_X1(STEP_BF16, row, loop, reduce, done)

// matF16x1sn and matBF16x1sn are matF16x1s and matBF16x1s with STEP4N's
// non-temporal prefetch: for one token's pass over a whole matrix, not for
// the passes of several tokens over one tile, whose later passes read the
// tile back from L2.

// func matF16x1sn(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
TEXT ·matF16x1sn(SB), NOSPLIT, $0-56
	STRIDED_X1(STEP_F16N, row, loop, reduce, done)

// func matBF16x1sn(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
TEXT ·matBF16x1sn(SB), NOSPLIT, $0-56
	STRIDED_X1(STEP_BF16N, row, loop, reduce, done)
