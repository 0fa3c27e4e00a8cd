//go:build amd64 && !purego

#include "textflag.h"

// The AVX2 twin of quantizeGo (generic.go): same operations, same order,
// so the same bytes.

// QX scales, rounds (adding and removing 1.5·2^23) and clamps eight
// values to ±127 (VMAXPS returns its constant operand for NaN), then
// converts them to int32; they are whole numbers, so truncation is exact.
#define QX(Y) \
	VMULPS Y6, Y, Y; \
	VADDPS Y14, Y, Y; \
	VSUBPS Y14, Y, Y; \
	VMAXPS Y13, Y, Y; \
	VMINPS Y12, Y, Y; \
	VCVTTPS2DQ Y, Y

// After the two packs, the 4-byte groups hold elements 0-3, 8-11, 16-19,
// 24-27, 4-7, 12-15, 20-23, 28-31; this permutation restores the order.
DATA qxPerm<>+0(SB)/4, $0
DATA qxPerm<>+4(SB)/4, $4
DATA qxPerm<>+8(SB)/4, $1
DATA qxPerm<>+12(SB)/4, $5
DATA qxPerm<>+16(SB)/4, $2
DATA qxPerm<>+20(SB)/4, $6
DATA qxPerm<>+24(SB)/4, $3
DATA qxPerm<>+28(SB)/4, $7
GLOBL qxPerm<>(SB), RODATA|NOPTR, $32

DATA qxMagic<>+0(SB)/4, $12582912.0
GLOBL qxMagic<>(SB), RODATA|NOPTR, $4
DATA qxMinus127<>+0(SB)/4, $-127.0
GLOBL qxMinus127<>(SB), RODATA|NOPTR, $4
DATA qx127<>+0(SB)/4, $127.0
GLOBL qx127<>(SB), RODATA|NOPTR, $4
DATA qxOne<>+0(SB)/4, $1.0
GLOBL qxOne<>(SB), RODATA|NOPTR, $4

// func quantizeAVX2(dst *byte, x *float32, nb int)
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	VMOVDQU qxPerm<>(SB), Y15
	VBROADCASTSS qxMagic<>(SB), Y14
	VBROADCASTSS qxMinus127<>(SB), Y13
	VBROADCASTSS qx127<>(SB), Y12
	MOVL $0x7fffffff, AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	VBROADCASTSS qxOne<>(SB), X10
	VXORPS X9, X9, X9

	PCALIGN $32
qxblock:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	// The largest magnitude: an unsigned max of the sign-cleared bits.
	VPAND Y11, Y0, Y4
	VPAND Y11, Y1, Y5
	VPAND Y11, Y2, Y6
	VPAND Y11, Y3, Y7
	VPMAXUD Y5, Y4, Y4
	VPMAXUD Y7, Y6, Y6
	VPMAXUD Y6, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPMAXUD X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPMAXUD X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPMAXUD X5, X4, X4
	// d = amax/127; id = 1/d, or 0 when d is 0.
	VDIVSS X12, X4, X5
	VMOVSS X5, (DI)
	VDIVSS X5, X10, X6
	VCMPSS $0, X9, X5, X7
	VANDNPS X6, X7, X6
	VBROADCASTSS X6, Y6
	QX(Y0)
	QX(Y1)
	QX(Y2)
	QX(Y3)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y15, Y0
	VMOVDQU Y0, 4(DI)
	ADDQ $128, SI
	ADDQ $36, DI
	DECQ CX
	JNZ qxblock
	VZEROUPPER
	RET
