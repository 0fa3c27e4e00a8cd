//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"

// AVX2 kernels for Q8_0 and Q4_0 weights against Q8_0-quantised
// activations (blocks of a float32 scale and 32 int8 values, 36 bytes).
//
// Each pass takes four weight rows at once. Per block, the four rows'
// exact integer products are formed with VPMADDUBSW/VPMADDWD and reduced
// with in-lane unpacks and adds to one register holding, in its low 128-bit
// lane, the sums over elements 0..15 of rows 0..3 and in its high lane the
// sums over elements 16..31; adding the lanes gives the four rows' block
// sums S (order.go). One convert, one multiply by the four rows' scales
// times the token's scale, and one FMA then serve four rows. The x4 kernels reuse each block of the four rows
// for four tokens from registers.
//
// Register use (ymm): Y0-Y3 the four rows' block (Q8_0: |w|; Q4_0: w),
// X4-X7 the accumulators of up to four tokens (one float per row), Y8
// int16 ones, X9 the four row scales, Y10 the token's block (Q8_0: x;
// Q4_0: |x|), Y11-Y15 temporaries.
//
// General registers: SI row 0 of the current four, R12/R14/R15 the byte
// offsets of rows 1, 2, 3 from it (clamped to the last row when fewer than
// four remain, so the spare lanes recompute a real row and are not
// stored), DX the current block of row 0, R8-R11 the current block of each
// token's activations, CX the blocks left, R13 the rows left, DI the
// output, BX the prefetch pointer.
//
// Prefetch: four rows read side by side are four streams the hardware
// prefetcher follows poorly (measured: a 26 MB Q8_0 matrix-vector product
// ran at half the old one-row kernel's speed). So each block also fetches
// the same share of the next four rows, which lie contiguously after
// these, one group ahead.
//
// The entry, group, scale and reduction steps (QENTRY, QGROUP1/2/4,
// SCALES, FINISH) and the Q4_0 token step TOK_Q4 are simd_amd64.h's,
// shared with the Q4_1/Q5_0/Q5_1 kernels.

// ROW_Q8 sets T to the token's x (Y10) negated where the row's weights
// (at M) are negative, so that VPMADDUBSW with |w| gives w·x. Weights may
// be -128: |w| is then 128 as an unsigned byte, which VPMADDUBSW reads
// correctly, while x is never -128.
#define ROW_Q8(M, ABSW, T) \
	VPSIGNB M, Y10, T; \
	VPMADDUBSW T, ABSW, T; \
	VPMADDWD Y8, T, T

#define TOKPREP_Q8(Rt) \
	VMOVDQU 4(Rt), Y10

// TOK_Q8 accumulates one token's block (at Rt) against the four rows
// into ACC.
#define TOK_Q8(Rt, ACC) \
	TOKPREP_Q8(Rt); \
	ROW_Q8(2(DX), Y0, Y11); \
	ROW_Q8(2(DX)(R12*1), Y1, Y12); \
	ROW_Q8(2(DX)(R14*1), Y2, Y13); \
	ROW_Q8(2(DX)(R15*1), Y3, Y14); \
	FINISH(Rt, ACC)

// Q8_HEAD loads the four rows' block: scales and |w|.
#define Q8_HEAD \
	SCALES; \
	WEIGHTS_Q8

#define WEIGHTS_Q8 \
	VPABSB 2(DX), Y0; \
	VPABSB 2(DX)(R12*1), Y1; \
	VPABSB 2(DX)(R14*1), Y2; \
	VPABSB 2(DX)(R15*1), Y3

// UNPACK_Q4 turns 16 bytes at M into 32 weights in W: low nibbles are
// elements 0..15, high nibbles 16..31, each minus 8. Y11 is scratch.
#define UNPACK_Q4(M, W, XW) \
	VMOVDQU M, XW; \
	VPSRLW $4, XW, X11; \
	VINSERTI128 $1, X11, W, W; \
	VPAND nibbleMask<>(SB), W, W; \
	VPSUBB eights<>(SB), W, W

// Q4_HEAD loads the four rows' Q4_0 block at DX: scales and signed
// quants.
#define Q4_HEAD \
	SCALES; \
	WEIGHTS_Q4

#define WEIGHTS_Q4 \
	UNPACK_Q4(2(DX), Y0, X0); \
	UNPACK_Q4(2(DX)(R12*1), Y1, X1); \
	UNPACK_Q4(2(DX)(R14*1), Y2, X2); \
	UNPACK_Q4(2(DX)(R15*1), Y3, X3)

// QCONST sets Y8 to int16 ones and clears Y9.
#define QCONST \
	MOVL $0x00010001, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8; \
	VXORPS Y9, Y9, Y9

DATA nibbleMask<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nibbleMask<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nibbleMask<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nibbleMask<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nibbleMask<>(SB), RODATA|NOPTR, $32

DATA eights<>+0(SB)/8, $0x0808080808080808
DATA eights<>+8(SB)/8, $0x0808080808080808
DATA eights<>+16(SB)/8, $0x0808080808080808
DATA eights<>+24(SB)/8, $0x0808080808080808
GLOBL eights<>(SB), RODATA|NOPTR, $32

// func matQ8x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ8x1(SB), NOSPLIT, $0-48
	Q1_KERNEL(QCONST, Q8_HEAD, TOK_Q8, Q_NEXTPF, $34)

// func matQ8x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ8x4(SB), NOSPLIT, $0-64
	Q4T_KERNEL(QCONST, Q8_HEAD, TOK_Q8, Q_NEXTPF, $34)

// func matQ4x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
TEXT ·matQ4x1(SB), NOSPLIT, $0-48
	Q1_KERNEL(QCONST, Q4_HEAD, TOK_Q4, Q4_NEXTPF, $18)

// func matQ4x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4x4(SB), NOSPLIT, $0-64
	Q4T_KERNEL(QCONST, Q4_HEAD, TOK_Q4, Q4_NEXTPF, $18)

// func matQ8x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ8x2(SB), NOSPLIT, $0-64
	Q2_KERNEL(QCONST, Q8_HEAD, TOK_Q8, Q_NEXTPF, $34)

// func matQ4x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
TEXT ·matQ4x2(SB), NOSPLIT, $0-64
	Q2_KERNEL(QCONST, Q4_HEAD, TOK_Q4, Q4_NEXTPF, $18)


// matQ8x1s and matQ8x2s read four streams of rows rows each,
// stride bytes apart, and take one row of each per group: rows g, rows+g,
// 2rows+g and 3rows+g. Four rows side by side, as matQ8x1 reads them,
// interleave four positions of the same pages, which the hardware
// prefetcher follows poorly even with the software prefetch of the next
// group; four streams far apart are four sequential reads it follows well
// (measured on a Zen 3: 1.3-1.5x matQ8x1's bytes per second on matrices far
// larger than the caches). All four rows are real, so no offsets are
// clamped, and the hardware prefetcher needs no software prefetch to
// follow them (matQ8x1s prefetches for another reason, below). Each row's arithmetic is the adjacent
// kernel's, so the results are the same bits.
//
// R12, R14 and R15 hold the offsets of streams 1..3 (SOFFS); a token's
// results for the group go to out, out+rows, out+2rows and out+3rows
// (SCATTER, with AX = 4*rows).
//
// matQ8x1s, the single-stream decode's kernel, also asks for each stream
// 512 bytes ahead with PREFETCHNTA. The hint is the point, not the
// prefetch: the weights are read once a token, and on a Zen 3, whose L3
// is filled with what L2 evicts, lines brought in as non-temporal do not
// displace it, so the KV cache and the activations that attention reads
// between two products stay there instead of coming back from memory.
// Measured in-process, alternating 32-token blocks of the two kernels
// (110M Q8_0, f16 cache, 2 threads): 1.05-1.07x with the hint at 512
// bytes, 1.02-1.04x at 256 or 2048, 1.01-1.02x with PREFETCHT0 at 1024
// (a null A/B read 0.98-0.99). Past a row's end the prefetch
// reads the stream's next row, which comes next; past the last it reads
// bytes that are never used, which a prefetch may.

// Q8_S1STEP and Q8_S2STEP are the four-stream kernels' blocks (S1_KERNEL,
// S2_KERNEL) for one token and two.
#define Q8_S1STEP \
	SCALES; \
	WEIGHTS_Q8; \
	TOK_Q8(R8, X4)

#define Q8_S2STEP \
	SCALES; \
	WEIGHTS_Q8; \
	TOK_Q8(R8, X4); \
	TOK_Q8(R9, X5)

// func matQ8x1s(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32, stride int)
TEXT ·matQ8x1s(SB), NOSPLIT, $0-56
	S1_KERNEL(QCONST, Q8_S1STEP)

// func matQ8x2s(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int, stride int)
TEXT ·matQ8x2s(SB), NOSPLIT, $0-72
	S2_KERNEL(QCONST, Q8_S2STEP)
