//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q6_K kernels; simd_kquant_amd64.h describes the layout and holds the
// quants' unpacking, shared with the VNNI twins (simd_q6k_vnni_amd64.s).

// ---- Q6_K ----

// func matQ6Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ6Kx1(SB), NOSPLIT, $80-48
	KX_ENTRY1(k6x20<>(SB), matQ6Kx1done)

matQ6Kx1group:
	KX_GROUP1(matQ6Kx1reduce)

	PCALIGN $32
matQ6Kx1super:
	Q6K_HEAD
	Q6K_ROWS0(0, 128)
	K_T1(KS_TOK, 0, 0)
	Q6K_ROWS1(32, 128)
	K_T1(KS_TOK, 36, 8)
	Q6K_ROWS2(0, 128)
	K_T1(KS_TOK, 72, 16)
	Q6K_ROWS3(32, 128)
	K_T1(KS_TOK, 108, 24)
	Q6K_ROWS0(64, 160)
	K_T1(KS_TOK, 144, 32)
	Q6K_ROWS1(96, 160)
	K_T1(KS_TOK, 180, 40)
	Q6K_ROWS2(64, 160)
	K_T1(KS_TOK, 216, 48)
	Q6K_ROWS3(96, 160)
	K_T1(KS_TOK, 252, 56)
	Q6K_PREFETCH
	ADDQ $210, DX
	ADDQ $288, R8
	DECQ CX
	JNZ matQ6Kx1super

matQ6Kx1reduce:
	STORE1(matQ6Kx1group, matQ6Kx1partial, matQ6Kx1done)

matQ6Kx1partial:
	PARTIAL1(matQ6Kx1done)

matQ6Kx1done:
	VZEROUPPER
	RET

// func matQ6Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ6Kx2(SB), NOSPLIT, $80-64
	KX_ENTRY(k6x20<>(SB), matQ6Kx2done)

matQ6Kx2group:
	KX_GROUP2(matQ6Kx2reduce)

	PCALIGN $32
matQ6Kx2super:
	Q6K_HEAD
	Q6K_ROWS0(0, 128)
	K_T2(KS_TOK, 0, 0)
	Q6K_ROWS1(32, 128)
	K_T2(KS_TOK, 36, 8)
	Q6K_ROWS2(0, 128)
	K_T2(KS_TOK, 72, 16)
	Q6K_ROWS3(32, 128)
	K_T2(KS_TOK, 108, 24)
	Q6K_ROWS0(64, 160)
	K_T2(KS_TOK, 144, 32)
	Q6K_ROWS1(96, 160)
	K_T2(KS_TOK, 180, 40)
	Q6K_ROWS2(64, 160)
	K_T2(KS_TOK, 216, 48)
	Q6K_ROWS3(96, 160)
	K_T2(KS_TOK, 252, 56)
	Q6K_PREFETCH
	ADDQ $210, DX
	ADDQ $288, R8
	ADDQ $288, R9
	DECQ CX
	JNZ matQ6Kx2super

matQ6Kx2reduce:
	STORE2(matQ6Kx2group, matQ6Kx2partial, matQ6Kx2done)

matQ6Kx2partial:
	PARTIAL2(matQ6Kx2done)

matQ6Kx2done:
	VZEROUPPER
	RET

// func matQ6Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ6Kx4(SB), NOSPLIT, $80-64
	KX_ENTRY(k6x20<>(SB), matQ6Kx4done)

matQ6Kx4group:
	KX_GROUP4(matQ6Kx4reduce)

	PCALIGN $32
matQ6Kx4super:
	Q6K_HEAD
	Q6K_ROWS0(0, 128)
	K_T4(KS_TOK, 0, 0)
	Q6K_ROWS1(32, 128)
	K_T4(KS_TOK, 36, 8)
	Q6K_ROWS2(0, 128)
	K_T4(KS_TOK, 72, 16)
	Q6K_ROWS3(32, 128)
	K_T4(KS_TOK, 108, 24)
	Q6K_ROWS0(64, 160)
	K_T4(KS_TOK, 144, 32)
	Q6K_ROWS1(96, 160)
	K_T4(KS_TOK, 180, 40)
	Q6K_ROWS2(64, 160)
	K_T4(KS_TOK, 216, 48)
	Q6K_ROWS3(96, 160)
	K_T4(KS_TOK, 252, 56)
	Q6K_PREFETCH
	ADDQ $210, DX
	ADDQ $288, R8
	ADDQ $288, R9
	ADDQ $288, R10
	ADDQ $288, R11
	DECQ CX
	JNZ matQ6Kx4super

matQ6Kx4reduce:
	STORE4(matQ6Kx4group, matQ6Kx4partial, matQ6Kx4done)

matQ6Kx4partial:
	PARTIAL4(matQ6Kx4done)

matQ6Kx4done:
	VZEROUPPER
	RET
