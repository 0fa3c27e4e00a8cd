//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "simd_kquant_vnni_amd64.h"

// The Q4_K kernels on AVX-512 VNNI: matQ4Kx1, matQ4Kx2 and matQ4Kx4
// (simd_q4k_amd64.s) with the token steps of simd_kquant_vnni_amd64.h.

// VQ4K_SUPER runs one superblock: the header, then the eight activation
// blocks, LO and HI the token steps of the even and odd ones (VKM_LO1
// and VKM_HI1, ...).
#define VQ4K_SUPER(LO, HI) \
	Q4K_HEAD(X9); \
	Q4K_LO(16); \
	LO(0, 0); \
	Q4K_HI(16); \
	HI(36, 4); \
	Q4K_LO(48); \
	LO(72, 8); \
	Q4K_HI(48); \
	HI(108, 12); \
	Q4K_LO(80); \
	LO(144, 16); \
	Q4K_HI(80); \
	HI(180, 20); \
	Q4K_LO(112); \
	LO(216, 24); \
	Q4K_HI(112); \
	HI(252, 28); \
	Q4K_PREFETCH; \
	ADDQ $144, DX

#define VQ4K_S1 VQ4K_SUPER(VKM_LO1, VKM_HI1)
#define VQ4K_S2 VQ4K_SUPER(VKM_LO2, VKM_HI2)
#define VQ4K_S4 VQ4K_SUPER(VKM_LO4, VKM_HI4)

// func matQ4Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4Kx1VNNI(SB), NOSPLIT, $160-48
	VK_X(out+40, VKCONST, k4ones8<>(SB), KX_GROUP1, VQ4K_S1, VK_ADV1, STORE1, PARTIAL1, v4x1g, v4x1s, v4x1r, v4x1p, v4x1d)

// func matQ4Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx2VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VKCONST, k4ones8<>(SB), KX_GROUP2, VQ4K_S2, VK_ADV2, STORE2, PARTIAL2, v4x2g, v4x2s, v4x2r, v4x2p, v4x2d)

// func matQ4Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx4VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VKCONST, k4ones8<>(SB), KX_GROUP4, VQ4K_S4, VK_ADV4, STORE4, PARTIAL4, v4x4g, v4x4s, v4x4r, v4x4p, v4x4d)
