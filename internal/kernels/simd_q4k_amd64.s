//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q4_K kernels; simd_kquant_amd64.h describes the layout.

// ---- Q4_K ----


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

// Q4K_A leaves in X11 the four rows' A = sc·Σq·x (as float32) of the
// activation block at XO(Rt) against the quants in Y0-Y3, SO locating sc.
#define Q4K_A(Rt, XO, SO) \
	VPMADDUBSW XO+4(Rt), Y0, Y11; \
	VPMADDUBSW XO+4(Rt), Y1, Y12; \
	VPMADDUBSW XO+4(Rt), Y2, Y13; \
	VPMADDUBSW XO+4(Rt), Y3, Y14; \
	VPMADDWD Y8, Y11, Y11; \
	VPMADDWD Y8, Y12, Y12; \
	VPMADDWD Y8, Y13, Y13; \
	VPMADDWD Y8, Y14, Y14; \
	KSUM4; \
	VEXTRACTI128 $1, Y11, X12; \
	VPADDD X12, X11, X11; \
	VPMOVZXBD SO(SP), X12; \
	VPMULLD X12, X11, X11; \
	VCVTDQ2PS X11, X11

// Q4K_TOKLO adds the even activation block 2c of chunk c (at XO(Rt),
// sub-block scales at SO) into ACC, and leaves the odd block's B in the
// frame at SLOT for Q4K_TOKHI. Both blocks' Σx are reduced together: their
// dword sums, lane-swapped into [halves of block 2c | halves of 2c+1],
// add and fold to each block's sum in its four lanes, then one multiply by
// [m2c of rows 0..3 | m2c+1 of rows 0..3] gives both blocks' B.
#define Q4K_TOKLO(Rt, XO, SO, ACC, SLOT) \
	Q4K_A(Rt, XO, SO); \
	VPMADDUBSW XO+4(Rt), Y10, Y12; \
	VPMADDUBSW XO+40(Rt), Y10, Y13; \
	VPMADDWD Y8, Y12, Y12; \
	VPMADDWD Y8, Y13, Y13; \
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

// Q4K_TOKHI adds the odd block 2c+1 (at XO(Rt), scales at SO) into ACC,
// its B read back from SLOT.
#define Q4K_TOKHI(Rt, XO, SO, ACC, SLOT) \
	Q4K_A(Rt, XO, SO); \
	VBROADCASTSS XO(Rt), X12; \
	VMULPS 64(SP), X12, X13; \
	VMULPS 80(SP), X12, X12; \
	VFMADD231PS X13, X11, ACC; \
	VFNMADD231PS SLOT(SP), X12, ACC

#define Q4K_LO1(XO, SO) \
	Q4K_TOKLO(R8, XO, SO, X4, 96)

#define Q4K_HI1(XO, SO) \
	Q4K_TOKHI(R8, XO, SO, X4, 96)

#define Q4K_LO2(XO, SO) \
	Q4K_TOKLO(R8, XO, SO, X4, 96); \
	Q4K_TOKLO(R9, XO, SO, X5, 112)

#define Q4K_HI2(XO, SO) \
	Q4K_TOKHI(R8, XO, SO, X4, 96); \
	Q4K_TOKHI(R9, XO, SO, X5, 112)

#define Q4K_LO4(XO, SO) \
	Q4K_TOKLO(R8, XO, SO, X4, 96); \
	Q4K_TOKLO(R9, XO, SO, X5, 112); \
	Q4K_TOKLO(R10, XO, SO, X6, 128); \
	Q4K_TOKLO(R11, XO, SO, X7, 144)

#define Q4K_HI4(XO, SO) \
	Q4K_TOKHI(R8, XO, SO, X4, 96); \
	Q4K_TOKHI(R9, XO, SO, X5, 112); \
	Q4K_TOKHI(R10, XO, SO, X6, 128); \
	Q4K_TOKHI(R11, XO, SO, X7, 144)

// Q4K_PREFETCH fetches this superblock's share (4·144 bytes) of the next
// four rows.
#define Q4K_PREFETCH \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	PREFETCHT0 192(BX); \
	PREFETCHT0 256(BX); \
	PREFETCHT0 320(BX); \
	PREFETCHT0 384(BX); \
	PREFETCHT0 448(BX); \
	PREFETCHT0 512(BX); \
	ADDQ $576, BX

// func matQ4Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4Kx1(SB), NOSPLIT, $160-48
	MOVQ w+0(FP), SI
	MOVQ rows+16(FP), R13
	MOVQ out+40(FP), DI
	KCONST(k4ones8<>(SB))
	TESTQ R13, R13
	JLE matQ4Kx1done

matQ4Kx1group:
	ROWOFFS
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), BX
	MOVQ xb+24(FP), R8
	VXORPS X4, X4, X4
	MOVQ SI, DX
	XORQ AX, AX
	MOVQ nb+32(FP), CX
	SHRQ $3, CX
	JZ matQ4Kx1reduce

	PCALIGN $32
matQ4Kx1super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	Q4K_LO1(0, 0)
	Q4K_HI(16)
	Q4K_HI1(36, 4)
	Q4K_LO(48)
	Q4K_LO1(72, 8)
	Q4K_HI(48)
	Q4K_HI1(108, 12)
	Q4K_LO(80)
	Q4K_LO1(144, 16)
	Q4K_HI(80)
	Q4K_HI1(180, 20)
	Q4K_LO(112)
	Q4K_LO1(216, 24)
	Q4K_HI(112)
	Q4K_HI1(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	DECQ CX
	JNZ matQ4Kx1super

matQ4Kx1reduce:
	CMPQ R13, $4
	JLT matQ4Kx1partial
	VMOVUPS X4, (DI)
	ADDQ $16, DI
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), SI
	SUBQ $4, R13
	JNZ matQ4Kx1group
	JMP matQ4Kx1done

matQ4Kx1partial:
	PARTIAL1(matQ4Kx1done)

matQ4Kx1done:
	VZEROUPPER
	RET

// func matQ4Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx2(SB), NOSPLIT, $160-64
	MOVQ w+0(FP), SI
	MOVQ rows+16(FP), R13
	MOVQ out+48(FP), DI
	KCONST(k4ones8<>(SB))
	TESTQ R13, R13
	JLE matQ4Kx2done

matQ4Kx2group:
	ROWOFFS
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), BX
	MOVQ xb+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R9
	VXORPS X4, X4, X4
	VXORPS X5, X5, X5
	MOVQ SI, DX
	XORQ AX, AX
	MOVQ nb+40(FP), CX
	SHRQ $3, CX
	JZ matQ4Kx2reduce

	PCALIGN $32
matQ4Kx2super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	Q4K_LO2(0, 0)
	Q4K_HI(16)
	Q4K_HI2(36, 4)
	Q4K_LO(48)
	Q4K_LO2(72, 8)
	Q4K_HI(48)
	Q4K_HI2(108, 12)
	Q4K_LO(80)
	Q4K_LO2(144, 16)
	Q4K_HI(80)
	Q4K_HI2(180, 20)
	Q4K_LO(112)
	Q4K_LO2(216, 24)
	Q4K_HI(112)
	Q4K_HI2(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	ADDQ $288, R9
	DECQ CX
	JNZ matQ4Kx2super

matQ4Kx2reduce:
	MOVQ ostride+56(FP), AX
	CMPQ R13, $4
	JLT matQ4Kx2partial
	VMOVUPS X4, (DI)
	VMOVUPS X5, (DI)(AX*1)
	ADDQ $16, DI
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), SI
	SUBQ $4, R13
	JNZ matQ4Kx2group
	JMP matQ4Kx2done

matQ4Kx2partial:
	PARTIAL2(matQ4Kx2done)

matQ4Kx2done:
	VZEROUPPER
	RET

// func matQ4Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx4(SB), NOSPLIT, $160-64
	MOVQ w+0(FP), SI
	MOVQ rows+16(FP), R13
	MOVQ out+48(FP), DI
	KCONST(k4ones8<>(SB))
	TESTQ R13, R13
	JLE matQ4Kx4done

matQ4Kx4group:
	ROWOFFS
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), BX
	MOVQ xb+24(FP), R8
	MOVQ xstride+32(FP), CX
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	VXORPS X4, X4, X4
	VXORPS X5, X5, X5
	VXORPS X6, X6, X6
	VXORPS X7, X7, X7
	MOVQ SI, DX
	XORQ AX, AX
	MOVQ nb+40(FP), CX
	SHRQ $3, CX
	JZ matQ4Kx4reduce

	PCALIGN $32
matQ4Kx4super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	Q4K_LO4(0, 0)
	Q4K_HI(16)
	Q4K_HI4(36, 4)
	Q4K_LO(48)
	Q4K_LO4(72, 8)
	Q4K_HI(48)
	Q4K_HI4(108, 12)
	Q4K_LO(80)
	Q4K_LO4(144, 16)
	Q4K_HI(80)
	Q4K_HI4(180, 20)
	Q4K_LO(112)
	Q4K_LO4(216, 24)
	Q4K_HI(112)
	Q4K_HI4(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	ADDQ $288, R9
	ADDQ $288, R10
	ADDQ $288, R11
	DECQ CX
	JNZ matQ4Kx4super

matQ4Kx4reduce:
	MOVQ ostride+56(FP), AX
	LEAQ (DI)(AX*2), CX
	CMPQ R13, $4
	JLT matQ4Kx4partial
	VMOVUPS X4, (DI)
	VMOVUPS X5, (DI)(AX*1)
	VMOVUPS X6, (CX)
	VMOVUPS X7, (CX)(AX*1)
	ADDQ $16, DI
	MOVQ rowBytes+8(FP), AX
	LEAQ (SI)(AX*4), SI
	SUBQ $4, R13
	JNZ matQ4Kx4group
	JMP matQ4Kx4done

matQ4Kx4partial:
	PARTIAL4(matQ4Kx4done)

matQ4Kx4done:
	VZEROUPPER
	RET
