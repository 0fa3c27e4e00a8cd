//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_q8vnni_amd64.h"

// The one- to four-token Q4_0 kernels on AVX-512 VNNI: matQ4x1, matQ4x2
// and matQ4x4 (simd_quant_amd64.s) with the quants left unsigned (0..15,
// VPDPBUSD's unsigned operand, against the token's signed bytes) and the
// offset of 8 taken off as the token's 8·Σx: VQ8_TOK with bytes of 8
// where the Q8_0 twins have bytes of 0x80 starts every row's lanes from
// -8·Σx, so the lane sums are those of (q-8)·x, which SUM4 and FINISH
// reduce and scale as the AVX2 kernels do. The integer sums are exact
// either way and the float steps are the same: the bits are matQ4x*'s.
// The bodies (Q1_KERNEL, Q2_KERNEL, Q4T_KERNEL), so the rows, the
// prefetches and the block steps, are the AVX2 kernels'.
//
// Registers as the Q8_0 twins' (simd_q8vnni_amd64.s), except: Y0-Y3 the
// rows' unsigned quants, Y8 bytes of 8, Y18 bytes of 0x0f (the nibble
// mask); the four-token kernel holds its tokens' accumulators in X4-X7.

// VQ4_CONST sets Y8 to bytes of 8 and Y18 to bytes of 0x0f, and clears
// Y9 and Y17.
#define VQ4_CONST \
	MOVL $0x08080808, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8; \
	MOVL $0x0f0f0f0f, AX; \
	VMOVD AX, X9; \
	VPBROADCASTD X9, Y18; \
	VXORPS Y9, Y9, Y9; \
	VPXORD Y17, Y17, Y17

// VQ4_NIBS unpacks the 16 bytes at M into W as quants 0..15, low nibbles
// elements 0..15 and high nibbles 16..31 (UNPACK_Q4 without its -8). X11
// is scratch.
#define VQ4_NIBS(M, W, XW) \
	VMOVDQU M, XW; \
	VPSRLW $4, XW, X11; \
	VINSERTI128 $1, X11, W, W; \
	VPANDD Y18, W, W

// VQ4_WEIGHTS unpacks the four rows' block at DX into Y0-Y3.
#define VQ4_WEIGHTS \
	VQ4_NIBS(2(DX), Y0, X0); \
	VQ4_NIBS(2(DX)(R12*1), Y1, X1); \
	VQ4_NIBS(2(DX)(R14*1), Y2, X2); \
	VQ4_NIBS(2(DX)(R15*1), Y3, X3)

// VQ4_HEAD1, VQ4_HEAD2 and VQ4_HEAD4 load the four rows' block at DX,
// scales and quants, for the one-, two- and four-token kernels (which
// have different general registers free: none for VQ8_SCALES with four
// tokens in R8-R11, so SCALES's vector inserts there).
#define VQ4_HEAD1 \
	VQ8_SCALES(AX, R9, R10); \
	VQ4_WEIGHTS

#define VQ4_HEAD2 \
	VQ8_SCALES(AX, R10, R11); \
	VQ4_WEIGHTS

#define VQ4_HEAD4 \
	SCALES; \
	VQ4_WEIGHTS

// func matQ4x1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4x1VNNI(SB), NOSPLIT, $0-48
	Q1_KERNEL(VQ4_CONST, VQ4_HEAD1, VQ8_TOK, Q4_NEXTPF, $18)

// func matQ4x2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4x2VNNI(SB), NOSPLIT, $0-64
	Q2_KERNEL(VQ4_CONST, VQ4_HEAD2, VQ8_TOK, Q4_NEXTPF, $18)

// func matQ4x4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4x4VNNI(SB), NOSPLIT, $0-64
	Q4T_KERNEL(VQ4_CONST, VQ4_HEAD4, VQ8_TOK, Q4_NEXTPF, $18)
