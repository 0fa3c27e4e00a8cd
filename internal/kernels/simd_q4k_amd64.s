//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q4_K kernels; simd_kquant_amd64.h describes the layout and holds the
// quants' unpacking, shared with the VNNI twins (simd_q4k_vnni_amd64.s).

// ---- Q4_K ----

// func matQ4Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4Kx1(SB), NOSPLIT, $160-48
	KX_ENTRY1(k4ones8<>(SB), matQ4Kx1done)

matQ4Kx1group:
	KX_GROUP1(matQ4Kx1reduce)

	PCALIGN $32
matQ4Kx1super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	KM_LO1(0, 0)
	Q4K_HI(16)
	KM_HI1(36, 4)
	Q4K_LO(48)
	KM_LO1(72, 8)
	Q4K_HI(48)
	KM_HI1(108, 12)
	Q4K_LO(80)
	KM_LO1(144, 16)
	Q4K_HI(80)
	KM_HI1(180, 20)
	Q4K_LO(112)
	KM_LO1(216, 24)
	Q4K_HI(112)
	KM_HI1(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	DECQ CX
	JNZ matQ4Kx1super

matQ4Kx1reduce:
	STORE1(matQ4Kx1group, matQ4Kx1partial, matQ4Kx1done)

matQ4Kx1partial:
	PARTIAL1(matQ4Kx1done)

matQ4Kx1done:
	VZEROUPPER
	RET

// func matQ4Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx2(SB), NOSPLIT, $160-64
	KX_ENTRY(k4ones8<>(SB), matQ4Kx2done)

matQ4Kx2group:
	KX_GROUP2(matQ4Kx2reduce)

	PCALIGN $32
matQ4Kx2super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	KM_LO2(0, 0)
	Q4K_HI(16)
	KM_HI2(36, 4)
	Q4K_LO(48)
	KM_LO2(72, 8)
	Q4K_HI(48)
	KM_HI2(108, 12)
	Q4K_LO(80)
	KM_LO2(144, 16)
	Q4K_HI(80)
	KM_HI2(180, 20)
	Q4K_LO(112)
	KM_LO2(216, 24)
	Q4K_HI(112)
	KM_HI2(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	ADDQ $288, R9
	DECQ CX
	JNZ matQ4Kx2super

matQ4Kx2reduce:
	STORE2(matQ4Kx2group, matQ4Kx2partial, matQ4Kx2done)

matQ4Kx2partial:
	PARTIAL2(matQ4Kx2done)

matQ4Kx2done:
	VZEROUPPER
	RET

// func matQ4Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4Kx4(SB), NOSPLIT, $160-64
	KX_ENTRY(k4ones8<>(SB), matQ4Kx4done)

matQ4Kx4group:
	KX_GROUP4(matQ4Kx4reduce)

	PCALIGN $32
matQ4Kx4super:
	Q4K_HEAD(X9)
	Q4K_LO(16)
	KM_LO4(0, 0)
	Q4K_HI(16)
	KM_HI4(36, 4)
	Q4K_LO(48)
	KM_LO4(72, 8)
	Q4K_HI(48)
	KM_HI4(108, 12)
	Q4K_LO(80)
	KM_LO4(144, 16)
	Q4K_HI(80)
	KM_HI4(180, 20)
	Q4K_LO(112)
	KM_LO4(216, 24)
	Q4K_HI(112)
	KM_HI4(252, 28)
	Q4K_PREFETCH
	ADDQ $144, DX
	ADDQ $288, R8
	ADDQ $288, R9
	ADDQ $288, R10
	ADDQ $288, R11
	DECQ CX
	JNZ matQ4Kx4super

matQ4Kx4reduce:
	STORE4(matQ4Kx4group, matQ4Kx4partial, matQ4Kx4done)

matQ4Kx4partial:
	PARTIAL4(matQ4Kx4done)

matQ4Kx4done:
	VZEROUPPER
	RET
