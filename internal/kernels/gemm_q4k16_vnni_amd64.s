//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_kquant_amd64.h"
#include "gemm_kquant_amd64.h"

// gemmQ4Kx8VNNI for sixteen tokens, two interleaved groups of eight (xa
// and xb, qInterleave8's layout), in 512-bit registers: the superblock
// unpacking (G4K_SUPER, the frame's records) is done once per group of
// four rows for all sixteen tokens, and each broadcast of a row's quants
// serves 64 multiply-adds instead of 32. A 512-bit op runs as two 256-bit
// halves on a Zen 4, so the multiplies cost the same as two eight-token
// calls; what is saved is loads, the unpacking and per-block overhead.
// (On Intel parts with AVX-512, which hasVNNI selects too, 512-bit code
// may lower the clock; that is unmeasured.)
//
// The quants stay VPDPBUSD's unsigned operand, broadcast into a register
// by VPBROADCASTD (the instruction's embedded broadcast is of its signed
// operand, which would need the activations flipped and corrected). The
// integer sums and the float steps per (row, block, token) are
// gemmQ4Kx8VNNI's, on sixteen lanes, so the bits are gemmQ4Kx8's.
//
// Registers (zmm): Z0-Z3 and Z16-Z19 the rows' even and odd block sums,
// Z4-Z7 their float accumulators (tokens 0..15 of rows 0..3), Z9 X_g
// (then dx), Z10-Z13 the broadcast quants (then scratch), Z14 the tokens'
// cvt(8·Σx), Z20-Z23 d and Z24-Z27 dmin of rows 0..3. General: as
// gemmQ4Kx8VNNI's, with R8 group A's current block and R11 group B's.

// func gemmQ4Kx16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ4Kx16VNNI(SB), 0, $1376-72
	G16_KERNEL(G4K_SUPER, 144)
