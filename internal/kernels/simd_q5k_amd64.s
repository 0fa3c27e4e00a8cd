//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q5_K kernels: the Q4_K ones (simd_q4k_amd64.s, whose layout
// simd_kquant_amd64.h describes) with the quants' fifth bit. A Q5_K
// header's first 16 bytes are a Q4_K header's, so Q4K_HEAD decodes them;
// the quants sit at 48 instead of 16, and qh at 16. Quants 0..31 keep
// VPMADDUBSW's pair sums within int16 (2·31·128 < 2^15) and A exact
// (|A| < 2^23), so the token steps are Q4_K's unchanged. The quants'
// unpacking (Q5K_LO, Q5K_HI) is in simd_kquant_amd64.h, shared with the
// VNNI twins (simd_q5k_vnni_amd64.s). They give dotQ5KGo's bits.

// func matQ5Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ5Kx1(SB), NOSPLIT, $160-48
	KX_ENTRY1(k4ones8<>(SB), matQ5Kx1done)

matQ5Kx1group:
	KX_GROUP1(matQ5Kx1reduce)

	PCALIGN $32
matQ5Kx1super:
	Q4K_HEAD(X9)
	Q5K_LO(48, 0)
	KM_LO1(0, 0)
	Q5K_HI(48, 1)
	KM_HI1(36, 4)
	Q5K_LO(80, 2)
	KM_LO1(72, 8)
	Q5K_HI(80, 3)
	KM_HI1(108, 12)
	Q5K_LO(112, 4)
	KM_LO1(144, 16)
	Q5K_HI(112, 5)
	KM_HI1(180, 20)
	Q5K_LO(144, 6)
	KM_LO1(216, 24)
	Q5K_HI(144, 7)
	KM_HI1(252, 28)
	Q5K_PREFETCH
	ADDQ $176, DX
	ADDQ $288, R8
	DECQ CX
	JNZ matQ5Kx1super

matQ5Kx1reduce:
	STORE1(matQ5Kx1group, matQ5Kx1partial, matQ5Kx1done)

matQ5Kx1partial:
	PARTIAL1(matQ5Kx1done)

matQ5Kx1done:
	VZEROUPPER
	RET

// func matQ5Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ5Kx2(SB), NOSPLIT, $160-64
	KX_ENTRY(k4ones8<>(SB), matQ5Kx2done)

matQ5Kx2group:
	KX_GROUP2(matQ5Kx2reduce)

	PCALIGN $32
matQ5Kx2super:
	Q4K_HEAD(X9)
	Q5K_LO(48, 0)
	KM_LO2(0, 0)
	Q5K_HI(48, 1)
	KM_HI2(36, 4)
	Q5K_LO(80, 2)
	KM_LO2(72, 8)
	Q5K_HI(80, 3)
	KM_HI2(108, 12)
	Q5K_LO(112, 4)
	KM_LO2(144, 16)
	Q5K_HI(112, 5)
	KM_HI2(180, 20)
	Q5K_LO(144, 6)
	KM_LO2(216, 24)
	Q5K_HI(144, 7)
	KM_HI2(252, 28)
	Q5K_PREFETCH
	ADDQ $176, DX
	ADDQ $288, R8
	ADDQ $288, R9
	DECQ CX
	JNZ matQ5Kx2super

matQ5Kx2reduce:
	STORE2(matQ5Kx2group, matQ5Kx2partial, matQ5Kx2done)

matQ5Kx2partial:
	PARTIAL2(matQ5Kx2done)

matQ5Kx2done:
	VZEROUPPER
	RET

// func matQ5Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ5Kx4(SB), NOSPLIT, $160-64
	KX_ENTRY(k4ones8<>(SB), matQ5Kx4done)

matQ5Kx4group:
	KX_GROUP4(matQ5Kx4reduce)

	PCALIGN $32
matQ5Kx4super:
	Q4K_HEAD(X9)
	Q5K_LO(48, 0)
	KM_LO4(0, 0)
	Q5K_HI(48, 1)
	KM_HI4(36, 4)
	Q5K_LO(80, 2)
	KM_LO4(72, 8)
	Q5K_HI(80, 3)
	KM_HI4(108, 12)
	Q5K_LO(112, 4)
	KM_LO4(144, 16)
	Q5K_HI(112, 5)
	KM_HI4(180, 20)
	Q5K_LO(144, 6)
	KM_LO4(216, 24)
	Q5K_HI(144, 7)
	KM_HI4(252, 28)
	Q5K_PREFETCH
	ADDQ $176, DX
	ADDQ $288, R8
	ADDQ $288, R9
	ADDQ $288, R10
	ADDQ $288, R11
	DECQ CX
	JNZ matQ5Kx4super

matQ5Kx4reduce:
	STORE4(matQ5Kx4group, matQ5Kx4partial, matQ5Kx4done)

matQ5Kx4partial:
	PARTIAL4(matQ5Kx4done)

matQ5Kx4done:
	VZEROUPPER
	RET
