// Shared by simd_q8vnni_amd64.s and simd_q4vnni_amd64.s: the one- to
// four-token VNNI kernels' scale loads and token step (see
// simd_q8vnni_amd64.s for the registers). VQ8_TOK starts every row's
// lanes from the token's correction, minus Y8's bytes times x: -128·Σx
// for the Q8_0 kernels' flipped weights, -8·Σx for Q4_0's offset.

// VQ8_SCALES is SCALES through general registers A, B and C: the four
// rows' float16 scales loaded as integers, packed into one quadword and
// converted, two vector operations instead of five (three of them
// shuffles). Measured on the in-cache one-token Q8_0 product, 1.03x.
#define VQ8_SCALES(A, B, C) \
	MOVWQZX (DX), A; \
	MOVWQZX (DX)(R12*1), B; \
	MOVWQZX (DX)(R14*1), C; \
	SHLQ $16, B; \
	ORQ B, A; \
	MOVWQZX (DX)(R15*1), B; \
	SHLQ $32, C; \
	SHLQ $48, B; \
	ORQ C, A; \
	ORQ B, A; \
	VMOVQ A, X9; \
	VCVTPH2PS X9, X9

// VQ8_TOK accumulates one token's block (at Rt) against the four rows in
// Y0-Y3 into ACC: Y16 = -(Y8's byte)·Σx per lane (-128·Σx, or -8·Σx for
// Q4_0), each row's sums start from it, and FINISH reduces and scales
// them as the AVX2 kernels do.
#define VQ8_TOK(Rt, ACC) \
	VMOVDQU 4(Rt), Y10; \
	VPXORD Y16, Y16, Y16; \
	VPDPBUSD Y10, Y8, Y16; \
	VPSUBD Y16, Y17, Y16; \
	VMOVDQA64 Y16, Y11; \
	VMOVDQA64 Y16, Y12; \
	VMOVDQA64 Y16, Y13; \
	VMOVDQA64 Y16, Y14; \
	VPDPBUSD Y10, Y0, Y11; \
	VPDPBUSD Y10, Y1, Y12; \
	VPDPBUSD Y10, Y2, Y13; \
	VPDPBUSD Y10, Y3, Y14; \
	FINISH(Rt, ACC)
