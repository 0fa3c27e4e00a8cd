//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q6_K kernels; simd_kquant_amd64.h describes the layout.

// ---- Q6_K ----

// Q6K_HEAD transposes the four rows' sixteen int8 scales into the frame
// and stores their d as float32 at 64(SP) (KS_STORE, KD_F16).
#define Q6K_HEAD \
	VMOVDQU 192(DX), X0; \
	VMOVDQU 192(DX)(R12*1), X1; \
	VMOVDQU 192(DX)(R14*1), X2; \
	VMOVDQU 192(DX)(R15*1), X3; \
	KS_STORE; \
	KD_F16(208)

// Quarter k of a half: low four bits from the low (k = 0, 1) or high
// (k = 2, 3) nibbles of ql at QL, high two bits from bits 2k, 2k+1 of qh
// at QH, moved to bits 4, 5. R is the row's offset register, Y the
// destination; Y15 is scratch.
#define Q6K_Q0(QL, QH, R, Y) \
	VPAND QL(DX)(R*1), Y9, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSLLW $4, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q1(QL, QH, R, Y) \
	VPAND QL(DX)(R*1), Y9, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSLLW $2, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q2(QL, QH, R, Y) \
	VMOVDQU QL(DX)(R*1), Y; \
	VPSRLW $4, Y, Y; \
	VPAND Y9, Y, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_Q3(QL, QH, R, Y) \
	VMOVDQU QL(DX)(R*1), Y; \
	VPSRLW $4, Y, Y; \
	VPAND Y9, Y, Y; \
	VMOVDQU QH(DX)(R*1), Y15; \
	VPSRLW $2, Y15, Y15; \
	VPAND k4x30<>(SB), Y15, Y15; \
	VPOR Y15, Y, Y

#define Q6K_ROWS0(QL, QH) \
	Q6K_Q0(QL, QH, AX, Y0); \
	Q6K_Q0(QL, QH, R12, Y1); \
	Q6K_Q0(QL, QH, R14, Y2); \
	Q6K_Q0(QL, QH, R15, Y3)

#define Q6K_ROWS1(QL, QH) \
	Q6K_Q1(QL, QH, AX, Y0); \
	Q6K_Q1(QL, QH, R12, Y1); \
	Q6K_Q1(QL, QH, R14, Y2); \
	Q6K_Q1(QL, QH, R15, Y3)

#define Q6K_ROWS2(QL, QH) \
	Q6K_Q2(QL, QH, AX, Y0); \
	Q6K_Q2(QL, QH, R12, Y1); \
	Q6K_Q2(QL, QH, R14, Y2); \
	Q6K_Q2(QL, QH, R15, Y3)

#define Q6K_ROWS3(QL, QH) \
	Q6K_Q3(QL, QH, AX, Y0); \
	Q6K_Q3(QL, QH, R12, Y1); \
	Q6K_Q3(QL, QH, R14, Y2); \
	Q6K_Q3(QL, QH, R15, Y3)

// Q6K_PREFETCH fetches this superblock's share (4·210 bytes) of the next
// four rows.
#define Q6K_PREFETCH \
	PREFETCHT0 (BX); \
	PREFETCHT0 64(BX); \
	PREFETCHT0 128(BX); \
	PREFETCHT0 192(BX); \
	PREFETCHT0 256(BX); \
	PREFETCHT0 320(BX); \
	PREFETCHT0 384(BX); \
	PREFETCHT0 448(BX); \
	PREFETCHT0 512(BX); \
	PREFETCHT0 576(BX); \
	PREFETCHT0 640(BX); \
	PREFETCHT0 704(BX); \
	PREFETCHT0 768(BX); \
	PREFETCHT0 832(BX); \
	ADDQ $840, BX

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
