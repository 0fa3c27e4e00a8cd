//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"

// The Q3_K and Q2_K kernels; simd_kquant_amd64.h describes the layout and
// holds the headers' and quants' unpacking, shared with the VNNI twins
// (simd_q3k_vnni_amd64.s).
// Both take the two low bits of activation block j's quants from bits
// 2(j%4), 2(j%4)+1 of the 32 qs bytes of half j/4 (a load, a word shift
// and a mask by Y9 = 0x03 bytes).
//
// Q3_K: the frame is Q6_K's (signed scales at 0(SP), d at 64(SP)) and the
// per-token step is KS_TOK with Y10 = 4s: the third bit (bit j of
// hmask[l]) is shifted to bit 2, so q = low bits + 4·high bit in 0..7
// stands for q−4.
//
// Q2_K: 0(SP) the 4-bit scales and 64(SP) the 4-bit mins, each laid out
// as KS_STORE lays out Q6_K's scales; 128(SP) d and 144(SP) dmin of rows
// 0..3 as float32. Per token and block, A = [sc2j | sc2j+1]·Σq·x over the
// two lanes (as Q6_K, without the offset) and B = [m2j | m2j+1]·Σx, Σx
// of each half broadcast across its lane; then Q4_K's two fused
// multiply-adds. Y10 holds byte ones for Σx.

// ---- Q3_K ----

// Q3K_SUPER runs one superblock for the tokens of T (K_T1, K_T2, K_T4).
#define Q3K_SUPER(T) \
	Q3K_SUPERT(T, KS_TOK)

// ---- Q2_K ----

// Q2K_TOK adds activation block XO/36 of the token at Rt into ACC, SO =
// 8·XO/36 locating its two scales (and, 64 bytes on, its two mins).
#define Q2K_TOK(Rt, XO, SO, ACC) \
	Q2K_A(K_DOT4, Rt, XO, SO); \
	VPMADDUBSW XO+4(Rt), Y10, Y12; \
	VPMADDWD Y8, Y12, Y12; \
	Q2K_B(Rt, XO, SO, ACC)

// Q2K_SUPER is Q3K_SUPER for Q2_K.
#define Q2K_SUPER(T) \
	Q2K_SUPERT(T, Q2K_TOK)

// K23_X is the body of a one-, two- or four-token kernel (OUT, GROUP,
// T, ADV, STORE, PARTIAL: out+40, KX_GROUP1, K_T1, K23_ADV1, STORE1,
// PARTIAL1 for one token; out+48, ..2, ..2 or ..4 for more): SUPER
// (Q3K_SUPER or Q2K_SUPER) over the superblocks of each group of four
// rows, C10 the constant for Y10, and G, S, R, P, D the kernel's labels
// (group, superblock loop, reduce, partial, done).
#define K23_X(OUT, GROUP, T, ADV, STORE, PARTIAL, C10, SUPER, G, S, R, P, D) \
	QENTRY(OUT, K23CONST(C10), D); \
G: \
	GROUP(R); \
	PCALIGN $32; \
S: \
	SUPER(T); \
	ADV; \
	DECQ CX; \
	JNZ S; \
R: \
	STORE(G, P, D); \
P: \
	PARTIAL(D); \
D: \
	VZEROUPPER; \
	RET

// K23_ADV1, K23_ADV2 and K23_ADV4 move the tokens' activations on by one
// superblock (eight blocks).
#define K23_ADV1 \
	ADDQ $288, R8

#define K23_ADV2 \
	ADDQ $288, R8; \
	ADDQ $288, R9

#define K23_ADV4 \
	K23_ADV2; \
	ADDQ $288, R10; \
	ADDQ $288, R11

#define K23_X1(C10, SUPER, G, S, R, P, D) \
	K23_X(out+40, KX_GROUP1, K_T1, K23_ADV1, STORE1, PARTIAL1, C10, SUPER, G, S, R, P, D)

#define K23_X2(C10, SUPER, G, S, R, P, D) \
	K23_X(out+48, KX_GROUP2, K_T2, K23_ADV2, STORE2, PARTIAL2, C10, SUPER, G, S, R, P, D)

#define K23_X4(C10, SUPER, G, S, R, P, D) \
	K23_X(out+48, KX_GROUP4, K_T4, K23_ADV4, STORE4, PARTIAL4, C10, SUPER, G, S, R, P, D)

// func matQ3Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ3Kx1(SB), NOSPLIT, $80-48
	K23_X1(k3x04<>(SB), Q3K_SUPER, q3x1g, q3x1s, q3x1r, q3x1p, q3x1d)

// func matQ3Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ3Kx2(SB), NOSPLIT, $80-64
	K23_X2(k3x04<>(SB), Q3K_SUPER, q3x2g, q3x2s, q3x2r, q3x2p, q3x2d)

// func matQ3Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ3Kx4(SB), NOSPLIT, $80-64
	K23_X4(k3x04<>(SB), Q3K_SUPER, q3x4g, q3x4s, q3x4r, q3x4p, q3x4d)

// func matQ2Kx1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ2Kx1(SB), NOSPLIT, $160-48
	K23_X1(k4ones8<>(SB), Q2K_SUPER, q2x1g, q2x1s, q2x1r, q2x1p, q2x1d)

// func matQ2Kx2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ2Kx2(SB), NOSPLIT, $160-64
	K23_X2(k4ones8<>(SB), Q2K_SUPER, q2x2g, q2x2s, q2x2r, q2x2p, q2x2d)

// func matQ2Kx4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ2Kx4(SB), NOSPLIT, $160-64
	K23_X4(k4ones8<>(SB), Q2K_SUPER, q2x4g, q2x4s, q2x4r, q2x4p, q2x4d)
