//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "simd_kquant_vnni_amd64.h"

// The Q3_K and Q2_K kernels on AVX-512 VNNI: matQ3Kx1 .. matQ2Kx4
// (simd_q3k_amd64.s) with the token steps of simd_kquant_vnni_amd64.h:
// VKS_TOK for Q3_K (z = 4), and VQ2K_TOK for Q2_K.

// VK23CONST is K23CONST with Y8 cleared (VKCONST).
#define VK23CONST(C10) \
	K23CONST(C10); \
	VPXOR Y8, Y8, Y8

// VQ2K_TOK is Q2K_TOK on VNNI: VK_DOT4 for the rows' sums, and the
// dword sums of x from VPDPBUSD against the byte ones in Y10.
#define VQ2K_TOK(Rt, XO, SO, ACC) \
	Q2K_A(VK_DOT4, Rt, XO, SO); \
	VPXOR Y12, Y12, Y12; \
	VPDPBUSD XO+4(Rt), Y10, Y12; \
	Q2K_B(Rt, XO, SO, ACC)

#define VQ3K_S1 Q3K_SUPERT(K_T1, VKS_TOK)
#define VQ3K_S2 Q3K_SUPERT(K_T2, VKS_TOK)
#define VQ3K_S4 Q3K_SUPERT(K_T4, VKS_TOK)
#define VQ2K_S1 Q2K_SUPERT(K_T1, VQ2K_TOK)
#define VQ2K_S2 Q2K_SUPERT(K_T2, VQ2K_TOK)
#define VQ2K_S4 Q2K_SUPERT(K_T4, VQ2K_TOK)

// func matQ3Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ3Kx1VNNI(SB), NOSPLIT, $80-48
	VK_X(out+40, VK23CONST, k3x04<>(SB), KX_GROUP1, VQ3K_S1, VK_ADV1, STORE1, PARTIAL1, v3x1g, v3x1s, v3x1r, v3x1p, v3x1d)

// func matQ3Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ3Kx2VNNI(SB), NOSPLIT, $80-64
	VK_X(out+48, VK23CONST, k3x04<>(SB), KX_GROUP2, VQ3K_S2, VK_ADV2, STORE2, PARTIAL2, v3x2g, v3x2s, v3x2r, v3x2p, v3x2d)

// func matQ3Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ3Kx4VNNI(SB), NOSPLIT, $80-64
	VK_X(out+48, VK23CONST, k3x04<>(SB), KX_GROUP4, VQ3K_S4, VK_ADV4, STORE4, PARTIAL4, v3x4g, v3x4s, v3x4r, v3x4p, v3x4d)

// func matQ2Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ2Kx1VNNI(SB), NOSPLIT, $160-48
	VK_X(out+40, VK23CONST, k4ones8<>(SB), KX_GROUP1, VQ2K_S1, VK_ADV1, STORE1, PARTIAL1, v2x1g, v2x1s, v2x1r, v2x1p, v2x1d)

// func matQ2Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ2Kx2VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VK23CONST, k4ones8<>(SB), KX_GROUP2, VQ2K_S2, VK_ADV2, STORE2, PARTIAL2, v2x2g, v2x2s, v2x2r, v2x2p, v2x2d)

// func matQ2Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ2Kx4VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VK23CONST, k4ones8<>(SB), KX_GROUP4, VQ2K_S4, VK_ADV4, STORE4, PARTIAL4, v2x4g, v2x4s, v2x4r, v2x4p, v2x4d)
