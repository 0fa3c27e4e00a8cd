//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "simd_kquant_vnni_amd64.h"

// The Q5_K kernels on AVX-512 VNNI: matQ5Kx1, matQ5Kx2 and matQ5Kx4
// (simd_q5k_amd64.s) with the token steps of simd_kquant_vnni_amd64.h,
// which hold for quants up to 31 as for Q4_K's.

// VQ5K_SUPER runs one superblock: the header, then the eight activation
// blocks, LO and HI the token steps of the even and odd ones (VKM_LO1
// and VKM_HI1, ...).
#define VQ5K_SUPER(LO, HI) \
	Q4K_HEAD(X9); \
	Q5K_LO(48, 0); \
	LO(0, 0); \
	Q5K_HI(48, 1); \
	HI(36, 4); \
	Q5K_LO(80, 2); \
	LO(72, 8); \
	Q5K_HI(80, 3); \
	HI(108, 12); \
	Q5K_LO(112, 4); \
	LO(144, 16); \
	Q5K_HI(112, 5); \
	HI(180, 20); \
	Q5K_LO(144, 6); \
	LO(216, 24); \
	Q5K_HI(144, 7); \
	HI(252, 28); \
	Q5K_PREFETCH; \
	ADDQ $176, DX

#define VQ5K_S1 VQ5K_SUPER(VKM_LO1, VKM_HI1)
#define VQ5K_S2 VQ5K_SUPER(VKM_LO2, VKM_HI2)
#define VQ5K_S4 VQ5K_SUPER(VKM_LO4, VKM_HI4)

// func matQ5Kx1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ5Kx1VNNI(SB), NOSPLIT, $160-48
	VK_X(out+40, VKCONST, k4ones8<>(SB), KX_GROUP1, VQ5K_S1, VK_ADV1, STORE1, PARTIAL1, v5x1g, v5x1s, v5x1r, v5x1p, v5x1d)

// func matQ5Kx2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ5Kx2VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VKCONST, k4ones8<>(SB), KX_GROUP2, VQ5K_S2, VK_ADV2, STORE2, PARTIAL2, v5x2g, v5x2s, v5x2r, v5x2p, v5x2d)

// func matQ5Kx4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ5Kx4VNNI(SB), NOSPLIT, $160-64
	VK_X(out+48, VKCONST, k4ones8<>(SB), KX_GROUP4, VQ5K_S4, VK_ADV4, STORE4, PARTIAL4, v5x4g, v5x4s, v5x4r, v5x4p, v5x4d)
