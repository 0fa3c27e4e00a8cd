//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_legacy_amd64.h"

// The Q5_0 and Q5_1 kernels; simd_legacy_amd64.h describes the layout.

// func matQ50x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ50x1(SB), NOSPLIT, $0-48
	LG_ENTRY1(lgOnes8<>(SB), matQ50x1done)

matQ50x1group:
	QGROUP1(QBLOCKS, matQ50x1reduce)

	PCALIGN $32
matQ50x1block:
	SCALES
	WEIGHTS_Q50
	TOK_Q4(R8, X4)
	LG_PREFETCH($88)
	ADDQ $22, DX
	ADDQ $36, R8
	DECQ CX
	JNZ matQ50x1block

matQ50x1reduce:
	STORE1(matQ50x1group, matQ50x1partial, matQ50x1done)

matQ50x1partial:
	PARTIAL1(matQ50x1done)

matQ50x1done:
	VZEROUPPER
	RET

// func matQ50x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ50x2(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ50x2done)

matQ50x2group:
	QGROUP2(QBLOCKS, matQ50x2reduce)

	PCALIGN $32
matQ50x2block:
	SCALES
	WEIGHTS_Q50
	TOK_Q4(R8, X4)
	LG_PREFETCH($88)
	TOK_Q4(R9, X5)
	ADDQ $22, DX
	ADDQ $36, R8
	ADDQ $36, R9
	DECQ CX
	JNZ matQ50x2block

matQ50x2reduce:
	STORE2(matQ50x2group, matQ50x2partial, matQ50x2done)

matQ50x2partial:
	PARTIAL2(matQ50x2done)

matQ50x2done:
	VZEROUPPER
	RET

// func matQ50x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ50x4(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ50x4done)

matQ50x4group:
	QGROUP4(QBLOCKS, matQ50x4reduce)

	PCALIGN $32
matQ50x4block:
	SCALES
	WEIGHTS_Q50
	TOK_Q4(R8, X4)
	LG_PREFETCH($88)
	TOK_Q4(R9, X5)
	TOK_Q4(R10, X6)
	TOK_Q4(R11, X7)
	ADDQ $22, DX
	ADDQ $36, R8
	ADDQ $36, R9
	ADDQ $36, R10
	ADDQ $36, R11
	DECQ CX
	JNZ matQ50x4block

matQ50x4reduce:
	STORE4(matQ50x4group, matQ50x4partial, matQ50x4done)

matQ50x4partial:
	PARTIAL4(matQ50x4done)

matQ50x4done:
	VZEROUPPER
	RET

// func matQ51x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ51x1(SB), NOSPLIT, $0-48
	LG_ENTRY1(lgOnes8<>(SB), matQ51x1done)

matQ51x1group:
	QGROUP1(QBLOCKS, matQ51x1reduce)

	PCALIGN $32
matQ51x1block:
	LG_SCALESM
	WEIGHTS_Q51
	TOK_MIN(R8, X4)
	LG_PREFETCH($96)
	ADDQ $24, DX
	ADDQ $36, R8
	DECQ CX
	JNZ matQ51x1block

matQ51x1reduce:
	STORE1(matQ51x1group, matQ51x1partial, matQ51x1done)

matQ51x1partial:
	PARTIAL1(matQ51x1done)

matQ51x1done:
	VZEROUPPER
	RET

// func matQ51x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ51x2(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ51x2done)

matQ51x2group:
	QGROUP2(QBLOCKS, matQ51x2reduce)

	PCALIGN $32
matQ51x2block:
	LG_SCALESM
	WEIGHTS_Q51
	TOK_MIN(R8, X4)
	LG_PREFETCH($96)
	TOK_MIN(R9, X5)
	ADDQ $24, DX
	ADDQ $36, R8
	ADDQ $36, R9
	DECQ CX
	JNZ matQ51x2block

matQ51x2reduce:
	STORE2(matQ51x2group, matQ51x2partial, matQ51x2done)

matQ51x2partial:
	PARTIAL2(matQ51x2done)

matQ51x2done:
	VZEROUPPER
	RET

// func matQ51x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ51x4(SB), NOSPLIT, $0-64
	LG_ENTRY(lgOnes8<>(SB), matQ51x4done)

matQ51x4group:
	QGROUP4(QBLOCKS, matQ51x4reduce)

	PCALIGN $32
matQ51x4block:
	LG_SCALESM
	WEIGHTS_Q51
	TOK_MIN(R8, X4)
	LG_PREFETCH($96)
	TOK_MIN(R9, X5)
	TOK_MIN(R10, X6)
	TOK_MIN(R11, X7)
	ADDQ $24, DX
	ADDQ $36, R8
	ADDQ $36, R9
	ADDQ $36, R10
	ADDQ $36, R11
	DECQ CX
	JNZ matQ51x4block

matQ51x4reduce:
	STORE4(matQ51x4group, matQ51x4partial, matQ51x4done)

matQ51x4partial:
	PARTIAL4(matQ51x4done)

matQ51x4done:
	VZEROUPPER
	RET
