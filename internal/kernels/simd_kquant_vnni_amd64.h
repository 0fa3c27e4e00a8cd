// The token steps of the one- to four-token K-quant kernels on AVX-512
// VNNI (simd_q4k_vnni_amd64.s, simd_q5k_vnni_amd64.s,
// simd_q6k_vnni_amd64.s and simd_q3k_vnni_amd64.s): the AVX2 kernels'
// layout, quant unpacking, reductions and float steps (simd_kquant_amd64.h)
// with VPDPBUSD in place of each VPMADDUBSW-VPMADDWD pair.
//
// VPDPBUSD adds to each dword the four products of unsigned bytes (the
// quants, or constant bytes) with signed ones (x), without saturating.
// VPMADDUBSW saturates its int16 pair sums, but with quants of at most 63
// against |x| ≤ 128 it never does, so VPMADDWD against int16 ones then
// gives the same dword sums of four products that one VPDPBUSD into a
// zeroed register gives. Everything from there (SUM4, the integer scales,
// the converts and fused multiply-adds) is the AVX2 kernels' own, so the
// integers A, B and S and the bits of the results are too.
//
// Q6_K and Q3_K subtract z = 32 or 4 from every quant. The AVX2 kernels
// subtract z·x in int16 pair sums; here each row's dword sums start from
// −z·Σx of four x (one VPDPBUSD of the z bytes against x, negated: exact,
// and the same for the four rows, so the starts are register copies), and
// VPDPBUSD adds Σq·x: the dwords of Σ(q−z)·x, the AVX2 kernels' own.
//
// Registers as the AVX2 kernels' (simd_kquant_amd64.h), but Y8 is zero
// (VPMADDWD's int16 ones are not needed) and Y15 holds the token's −z·Σx
// until SUM4 takes it back as scratch. Everything but VPDPBUSD stays in
// Y0-Y15 with VEX encodings: with Y16 and Y17 (EVEX VPXORD, VPSUBD and
// VMOVDQA64 copies) the Q6_K one-token kernel ran 0.78-0.88x the AVX2
// one's speed out of cache, against 0.98-1.00x this way (in cache 1.13x
// and 1.07x).

// VKCONST is KCONST with Y8 cleared.
#define VKCONST(C10) \
	KCONST(C10); \
	VPXOR Y8, Y8, Y8

// VK_DOT4 is K_DOT4 on VNNI: the four rows' dword sums of q·x, zeroed by
// VPXOR (which needs no execution unit), then SUM4.
#define VK_DOT4(Rt, XO) \
	VPXOR Y11, Y11, Y11; \
	VPXOR Y12, Y12, Y12; \
	VPXOR Y13, Y13, Y13; \
	VPXOR Y14, Y14, Y14; \
	VPDPBUSD XO+4(Rt), Y0, Y11; \
	VPDPBUSD XO+4(Rt), Y1, Y12; \
	VPDPBUSD XO+4(Rt), Y2, Y13; \
	VPDPBUSD XO+4(Rt), Y3, Y14; \
	SUM4

// VKM_A is KM_A with VK_DOT4.
#define VKM_A(Rt, XO, SO) \
	KM_ADOT(VK_DOT4, Rt, XO, SO)

// VKM_TOKLO is KM_TOKLO on VNNI: the two blocks' dword sums of x come
// from VPDPBUSD against the byte ones in Y10, then fold as there.
#define VKM_TOKLO(Rt, XO, SO, ACC, SLOT) \
	VKM_A(Rt, XO, SO); \
	VPXOR Y12, Y12, Y12; \
	VPXOR Y13, Y13, Y13; \
	VPDPBUSD XO+4(Rt), Y10, Y12; \
	VPDPBUSD XO+40(Rt), Y10, Y13; \
	KM_BFOLD(Rt, XO, SO, ACC, SLOT)

// VKM_TOKHI is KM_TOKHI with VKM_A.
#define VKM_TOKHI(Rt, XO, SO, ACC, SLOT) \
	VKM_A(Rt, XO, SO); \
	KM_HITERMS(Rt, XO, ACC, SLOT)

// VKM_LO1 .. VKM_HI4 are KM_LO1 .. KM_HI4 on VNNI.
#define VKM_LO1(XO, SO) KM_TOKS1(VKM_TOKLO, XO, SO)
#define VKM_HI1(XO, SO) KM_TOKS1(VKM_TOKHI, XO, SO)
#define VKM_LO2(XO, SO) KM_TOKS2(VKM_TOKLO, XO, SO)
#define VKM_HI2(XO, SO) KM_TOKS2(VKM_TOKHI, XO, SO)
#define VKM_LO4(XO, SO) KM_TOKS4(VKM_TOKLO, XO, SO)
#define VKM_HI4(XO, SO) KM_TOKS4(VKM_TOKHI, XO, SO)

// VKS_TOK is KS_TOK on VNNI, z the bytes of Y10: the rows' sums start
// from −z·Σx (Y15, copied by register moves) and VPDPBUSD adds q·x.
#define VKS_TOK(Rt, XO, SO, ACC) \
	VPXOR Y15, Y15, Y15; \
	VPDPBUSD XO+4(Rt), Y10, Y15; \
	VPSUBD Y15, Y8, Y15; \
	VMOVDQA Y15, Y11; \
	VMOVDQA Y15, Y12; \
	VMOVDQA Y15, Y13; \
	VMOVDQA Y15, Y14; \
	VPDPBUSD XO+4(Rt), Y0, Y11; \
	VPDPBUSD XO+4(Rt), Y1, Y12; \
	VPDPBUSD XO+4(Rt), Y2, Y13; \
	VPDPBUSD XO+4(Rt), Y3, Y14; \
	SUM4; \
	VPMOVSXBD SO(SP), Y12; \
	VPMULLD Y12, Y11, Y11; \
	VEXTRACTI128 $1, Y11, X12; \
	VPADDD X12, X11, X11; \
	VCVTDQ2PS X11, X11; \
	VBROADCASTSS XO(Rt), X12; \
	VMULPS 64(SP), X12, X12; \
	VFMADD231PS X12, X11, ACC

// VK_ADV1, VK_ADV2 and VK_ADV4 move the tokens' activations on by one
// superblock (eight blocks).
#define VK_ADV1 \
	ADDQ $288, R8

#define VK_ADV2 \
	ADDQ $288, R8; \
	ADDQ $288, R9

#define VK_ADV4 \
	VK_ADV2; \
	ADDQ $288, R10; \
	ADDQ $288, R11

// VK_X is the body of a one-, two- or four-token kernel: QENTRY with the
// constants of CONST(C10), then for each group of four rows (GROUP:
// KX_GROUP1, 2 or 4) SUPER, one superblock for the kernel's tokens, over
// the superblocks, the tokens moved on by ADV (VK_ADV1, 2 or 4); then
// STORE and PARTIAL (STORE1 and PARTIAL1, ...). OUT is the frame argument
// out (out+40 for one token, out+48 for more); G, S, R, P and D are the
// kernel's labels (group, superblock loop, reduce, partial, done).
#define VK_X(OUT, CONST, C10, GROUP, SUPER, ADV, STORE, PARTIAL, G, S, R, P, D) \
	QENTRY(OUT, CONST(C10), D); \
G: \
	GROUP(R); \
	PCALIGN $32; \
S: \
	SUPER; \
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
