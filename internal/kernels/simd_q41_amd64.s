//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_legacy_amd64.h"

// The Q4_1 kernels; simd_legacy_amd64.h describes the layout.

// func matQ41x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ41x1(SB), NOSPLIT, $0-48
	LG_ENTRY1(lgOnes8<>(SB), matQ41x1done)

matQ41x1group:
	QGROUP1(QBLOCKS, matQ41x1reduce)

	PCALIGN $32
matQ41x1block:
	LG_SCALESM
	WEIGHTS_Q41
	TOK_MIN(R8, X4)
	LG_PREFETCH($80)
	ADDQ $20, DX
	ADDQ $36, R8
	DECQ CX
	JNZ matQ41x1block

matQ41x1reduce:
	STORE1(matQ41x1group, matQ41x1partial, matQ41x1done)

matQ41x1partial:
	PARTIAL1(matQ41x1done)

matQ41x1done:
	VZEROUPPER
	RET

// func matQ41x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ41x2(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ41x2done)

matQ41x2group:
	QGROUP2(QBLOCKS, matQ41x2reduce)

	PCALIGN $32
matQ41x2block:
	LG_SCALESM
	WEIGHTS_Q41
	TOK_MIN(R8, X4)
	LG_PREFETCH($80)
	TOK_MIN(R9, X5)
	ADDQ $20, DX
	ADDQ $36, R8
	ADDQ $36, R9
	DECQ CX
	JNZ matQ41x2block

matQ41x2reduce:
	STORE2(matQ41x2group, matQ41x2partial, matQ41x2done)

matQ41x2partial:
	PARTIAL2(matQ41x2done)

matQ41x2done:
	VZEROUPPER
	RET

// func matQ41x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ41x4(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ41x4done)

matQ41x4group:
	QGROUP4(QBLOCKS, matQ41x4reduce)

	PCALIGN $32
matQ41x4block:
	LG_SCALESM
	WEIGHTS_Q41
	TOK_MIN(R8, X4)
	LG_PREFETCH($80)
	TOK_MIN(R9, X5)
	TOK_MIN(R10, X6)
	TOK_MIN(R11, X7)
	ADDQ $20, DX
	ADDQ $36, R8
	ADDQ $36, R9
	ADDQ $36, R10
	ADDQ $36, R11
	DECQ CX
	JNZ matQ41x4block

matQ41x4reduce:
	STORE4(matQ41x4group, matQ41x4partial, matQ41x4done)

matQ41x4partial:
	PARTIAL4(matQ41x4done)

matQ41x4done:
	VZEROUPPER
	RET
