//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "simd_kquant_vnni_amd64.h"

// The Q6_K kernels on AVX-512 VNNI: matQ6Kx1, matQ6Kx2 and matQ6Kx4
// (simd_q6k_amd64.s) with VKS_TOK (simd_kquant_vnni_amd64.h) for KS_TOK.

// VQ6K_SUPER runs one superblock for the tokens of T (K_T1, K_T2, K_T4).
#define VQ6K_SUPER(T) \
	Q6K_HEAD; \
	Q6K_ROWS0(0, 128); \
	T(VKS_TOK, 0, 0); \
	Q6K_ROWS1(32, 128); \
	T(VKS_TOK, 36, 8); \
	Q6K_ROWS2(0, 128); \
	T(VKS_TOK, 72, 16); \
	Q6K_ROWS3(32, 128); \
	T(VKS_TOK, 108, 24); \
	Q6K_ROWS0(64, 160); \
	T(VKS_TOK, 144, 32); \
	Q6K_ROWS1(96, 160); \
	T(VKS_TOK, 180, 40); \
	Q6K_ROWS2(64, 160); \
	T(VKS_TOK, 216, 48); \
	Q6K_ROWS3(96, 160); \
	T(VKS_TOK, 252, 56); \
	Q6K_PREFETCH; \
	ADDQ $210, DX

#define VQ6K_S1 VQ6K_SUPER(K_T1)
#define VQ6K_S2 VQ6K_SUPER(K_T2)
#define VQ6K_S4 VQ6K_SUPER(K_T4)

// func matQ6Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ6Kx1VNNI(SB), NOSPLIT, $80-48
	VK_X(out+40, VKCONST, k6x20<>(SB), KX_GROUP1, VQ6K_S1, VK_ADV1, STORE1, PARTIAL1, v6x1g, v6x1s, v6x1r, v6x1p, v6x1d)

// func matQ6Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ6Kx2VNNI(SB), NOSPLIT, $80-64
	VK_X(out+48, VKCONST, k6x20<>(SB), KX_GROUP2, VQ6K_S2, VK_ADV2, STORE2, PARTIAL2, v6x2g, v6x2s, v6x2r, v6x2p, v6x2d)

// func matQ6Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ6Kx4VNNI(SB), NOSPLIT, $80-64
	VK_X(out+48, VKCONST, k6x20<>(SB), KX_GROUP4, VQ6K_S4, VK_ADV4, STORE4, PARTIAL4, v6x4g, v6x4s, v6x4r, v6x4p, v6x4d)
