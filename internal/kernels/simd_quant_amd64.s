//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"

// AVX2 kernels for Q8_0 and Q4_0 weights against Q8_0-quantised activations.

// Quantised weights. Per block: the weight scale (float16 at offset 0)
// goes to X10 as float32; the 32 weights as int8 go to Y11 and their
// absolute values to Y12. Y14 holds int16 ones for VPMADDWD; for Q4_0, Y15
// holds the 0x0f nibble mask and Y13 the bytes 8.
#define WBLOCK_Q8 \
	MOVWLZX (DX), AX; \
	VMOVD AX, X10; \
	VCVTPH2PS X10, X10; \
	VMOVDQU 2(DX), Y11; \
	VPSIGNB Y11, Y11, Y12

// Q4_0: low nibbles are elements 0..15, high nibbles 16..31.
#define WBLOCK_Q4 \
	MOVWLZX (DX), AX; \
	VMOVD AX, X10; \
	VCVTPH2PS X10, X10; \
	VMOVDQU 2(DX), X11; \
	VPSRLW $4, X11, X12; \
	VINSERTI128 $1, X12, Y11, Y11; \
	VPAND Y15, Y11, Y11; \
	VPSUBB Y13, Y11, Y11; \
	VPSIGNB Y11, Y11, Y12

// QTOK accumulates one token's block (at Rt+BX: float32 scale, 32 int8)
// into ACC: 8 exact int32 lane sums of 4 products each, converted to
// float32 and added with one FMA by the combined scale dw*dx.
#define QTOK(Rt, ACC, T1, T2, X2) \
	VMOVDQU 4(Rt)(BX*1), T1; \
	VPSIGNB Y11, T1, T1; \
	VPMADDUBSW T1, Y12, T1; \
	VPMADDWD Y14, T1, T1; \
	VCVTDQ2PS T1, T1; \
	VMULSS (Rt)(BX*1), X10, X2; \
	VBROADCASTSS X2, T2; \
	VFMADD231PS T1, T2, ACC

#define QCONST \
	MOVL $0x00010001, AX; \
	VMOVD AX, X14; \
	VPBROADCASTD X14, Y14; \
	MOVL $0x0f0f0f0f, AX; \
	VMOVD AX, X15; \
	VPBROADCASTD X15, Y15; \
	MOVL $0x08080808, AX; \
	VMOVD AX, X13; \
	VPBROADCASTD X13, Y13

// func matQ8x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ8x1(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ xb+24(FP), R8
	MOVQ out+40(FP), DI
	QCONST
	TESTQ R13, R13
	JZ Q8x1done

Q8x1row:
	VXORPS Y0, Y0, Y0
	MOVQ SI, DX
	XORQ BX, BX
	MOVQ nb+32(FP), CX
	TESTQ CX, CX
	JZ Q8x1reduce

Q8x1block:
	WBLOCK_Q8
	QTOK(R8, Y0, Y4, Y5, X5)
	ADDQ $34, DX
	ADDQ $36, BX
	DECQ CX
	JNZ Q8x1block

Q8x1reduce:
	REDUCE8(Y0, X0, X1)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ Q8x1row

Q8x1done:
	VZEROUPPER
	RET

// func matQ8x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ8x4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ xb+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	MOVQ out+48(FP), DI
	QCONST
	TESTQ R13, R13
	JZ Q8x4done

Q8x4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ SI, DX
	XORQ BX, BX
	MOVQ nb+40(FP), CX
	TESTQ CX, CX
	JZ Q8x4reduce

Q8x4block:
	WBLOCK_Q8
	QTOK(R8, Y0, Y4, Y5, X5)
	QTOK(R9, Y1, Y6, Y7, X7)
	QTOK(R10, Y2, Y8, Y9, X9)
	QTOK(R11, Y3, Y4, Y5, X5)
	ADDQ $34, DX
	ADDQ $36, BX
	DECQ CX
	JNZ Q8x4block

Q8x4reduce:
	REDUCE8(Y0, X0, X4)
	REDUCE8(Y1, X1, X5)
	REDUCE8(Y2, X2, X6)
	REDUCE8(Y3, X3, X7)
	MOVQ ostride+56(FP), AX
	VMOVSS X0, (DI)
	VMOVSS X1, (DI)(AX*1)
	VMOVSS X2, (DI)(AX*2)
	LEAQ (DI)(AX*2), CX
	VMOVSS X3, (CX)(AX*1)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ Q8x4row

Q8x4done:
	VZEROUPPER
	RET

// func matQ4x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4x1(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ xb+24(FP), R8
	MOVQ out+40(FP), DI
	QCONST
	TESTQ R13, R13
	JZ Q4x1done

Q4x1row:
	VXORPS Y0, Y0, Y0
	MOVQ SI, DX
	XORQ BX, BX
	MOVQ nb+32(FP), CX
	TESTQ CX, CX
	JZ Q4x1reduce

Q4x1block:
	WBLOCK_Q4
	QTOK(R8, Y0, Y4, Y5, X5)
	ADDQ $18, DX
	ADDQ $36, BX
	DECQ CX
	JNZ Q4x1block

Q4x1reduce:
	REDUCE8(Y0, X0, X1)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ Q4x1row

Q4x1done:
	VZEROUPPER
	RET

// func matQ4x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4x4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R12
	MOVQ rows+16(FP), R13
	MOVQ xb+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	MOVQ out+48(FP), DI
	QCONST
	TESTQ R13, R13
	JZ Q4x4done

Q4x4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ SI, DX
	XORQ BX, BX
	MOVQ nb+40(FP), CX
	TESTQ CX, CX
	JZ Q4x4reduce

Q4x4block:
	WBLOCK_Q4
	QTOK(R8, Y0, Y4, Y5, X5)
	QTOK(R9, Y1, Y6, Y7, X7)
	QTOK(R10, Y2, Y8, Y9, X9)
	QTOK(R11, Y3, Y4, Y5, X5)
	ADDQ $18, DX
	ADDQ $36, BX
	DECQ CX
	JNZ Q4x4block

Q4x4reduce:
	REDUCE8(Y0, X0, X4)
	REDUCE8(Y1, X1, X5)
	REDUCE8(Y2, X2, X6)
	REDUCE8(Y3, X3, X7)
	MOVQ ostride+56(FP), AX
	VMOVSS X0, (DI)
	VMOVSS X1, (DI)(AX*1)
	VMOVSS X2, (DI)(AX*2)
	LEAQ (DI)(AX*2), CX
	VMOVSS X3, (CX)(AX*1)
	ADDQ $4, DI
	ADDQ R12, SI
	DECQ R13
	JNZ Q4x4row

Q4x4done:
	VZEROUPPER
	RET

