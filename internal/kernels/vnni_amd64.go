//go:build amd64 && !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// hasVNNI reports whether this CPU (and OS) runs the AVX-512 VNNI
// kernels: VPDPBUSD on 256-bit registers (AVX512VL) and the EVEX forms
// of the byte and dword instructions around it (AVX512BW, AVX512F).
var hasVNNI = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI

// useVNNI selects the VNNI kernels where the CPU has them: every
// product of Q8_0, Q4_K and Q6_K weights, Q5_K's of one to four and of
// sixteen tokens, the one- to four-token products of Q3_K and Q2_K
// (their batched products stay on the AVX2 kernels), Q4_0's of one to
// four and of sixteen tokens, and the batched products of Q4_1, Q5_0
// and Q5_1: sixteen tokens for all three, eight for Q5_0 and Q5_1 (their
// one- to four-token products stay on AVX2). They give the same bits as
// the AVX2 ones (the integer sums are exact either way and the float
// steps are the same), so the choice is one of speed only; tests and
// benchmarks clear it to compare the two.
var useVNNI = hasVNNI

// vnniOn reports whether the VNNI kernels are in use: useSIMD too, since
// tests clear that to select the pure-Go kernels.
func vnniOn() bool { return useSIMD && useVNNI }

// gemmQ8x8VNNI is gemmQ8x8 on AVX-512 VNNI (gemm_q8vnni_amd64.s), for
// every tile: it takes weights of -128 too.
//
//go:noescape
func gemmQ8x8VNNI(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmQ8x16VNNI is gemmQ8x8VNNI for sixteen tokens, the interleaved
// groups xa (tokens 0..7) and xb (8..15), in 512-bit registers; sums is
// q8NegSums's table for the same rows (gemm_q8vnni_amd64.s). While it
// works on a group of four rows it prefetches the group ahead bytes
// further on: vnniTiles passes the next tile's, which q8NegSums would
// otherwise be the first to read, at a third of the rate a stream reads
// memory, while this kernel waits on nothing but arithmetic. (With 32
// tokens or more each pair of groups prefetches the next tile again:
// from the second on, the lines are in the caches and the prefetches
// cost little.)
//
//go:noescape
func gemmQ8x16VNNI(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int, sums *int32, ahead int)

// q8NegSums writes, for gemmQ8x16VNNI, -128 times the sum of every
// block's weights of rows rows at w and the block's scale as a float32,
// in groups of four rows (the last group's missing rows repeating its
// last row): (rows+3)/4·nb·8 int32s, four sums then four scales a block.
//
//go:noescape
func q8NegSums(w unsafe.Pointer, rowBytes, rows, nb int, dst *int32)

// q8SumsCap bounds q8NegSums's table for one tile of gemmQ8Rows: a tile
// holds at most tileBytes of weights, rounded up to a multiple of four
// rows of at most gemmMaxBlocks blocks, and a block takes two int32s a
// row.
const q8SumsCap = 2 * (tileBytes/34 + 4*gemmMaxBlocks)

// gemmQ8RowsVNNI is gemmQ8Rows on the VNNI kernels: pairs of groups of
// eight tokens through the sixteen-token kernel, a group left over
// through the eight-token one, and the tokens left after that through
// q1, q2 and q4.
func gemmQ8RowsVNNI(w *Matrix, r0, r1, tile int, xq, xi []byte, n int, out []float32, ostride int, q1 quantX1, q2, q4 quantX4, st *x16Stores) {
	if n < 8+gemmMinTokens {
		// No pair: no sums to make (nor a buffer to clear).
		vnniTiles(nil, w, r0, r1, tile, xq, xi, n, out, ostride, q1, q2, q4, nil)
		return
	}
	var sums [q8SumsCap]int32
	if (tile+3)/4*8*(w.Cols/32) > len(sums) {
		panic("kernels: a Q8_0 tile's block sums outgrow their buffer")
	}
	vnniTiles(sums[:], w, r0, r1, tile, xq, xi, n, out, ostride, q1, q2, q4, st)
}

// vnniTiles is gemmQ8RowsVNNI's loop over tiles: per tile, with pairs of
// groups to multiply, the blocks' sums and scales once (q8NegSums, into
// sums), then the kernels, the sixteen-token one's stores through st
// (x16Stores).
func vnniTiles(sums []int32, w *Matrix, r0, r1, tile int, xq, xi []byte, n int, out []float32, ostride int, q1 quantX1, q2, q4 quantX4, st *x16Stores) {
	nb := w.Cols / 32
	rb := nb * 34
	group := func(g int) unsafe.Pointer { return unsafe.Pointer(&xi[g*nb*xiBlock]) }
	for t0 := r0; t0 < r1; t0 += tile {
		rows := min(tile, r1-t0)
		wp := unsafe.Pointer(&w.Data[t0*rb])
		i, g := 0, 0
		if n-i >= 8+gemmMinTokens {
			q8NegSums(wp, rb, rows, nb, &sums[0])
		}
		for ; n-i >= 8+gemmMinTokens; i, g = i+16, g+2 {
			xa, xb, nt := group(g), group(g+1), min(16, n-i)
			st.run(rows, nt, out[i*ostride+t0:], ostride, func(s0, sr int, o *float32, os int) {
				gemmQ8x16VNNI(unsafe.Add(wp, s0*rb), rb, sr, xa, xb, nb, o, os*4, nt, &sums[s0/4*nb*8], rows*rb)
			})
		}
		for ; n-i >= gemmMinTokens; i, g = i+8, g+1 {
			gemmQ8x8VNNI(wp, rb, rows, group(g), nb, &out[i*ostride+t0], ostride*4, min(8, n-i))
		}
		quantTile(q1, q2, q4, wp, rb, rows, xq, nb, min(i, n), n, out[t0:], ostride)
	}
}

// vnniBatched returns the VNNI sixteen-token kernel and the VNNI twin of
// the eight-token kernel g8 of weights of type t where there are some
// (Q4_K, Q6_K, Q5_0 and Q5_1, and the sixteen-token ones of Q5_K, Q4_0
// and Q4_1; Q8_0's batched products take gemmQ8RowsVNNI), else nil and
// g8.
func vnniBatched(t tensor.DType, g8 gemmX8) (gemmX16, gemmX8) {
	switch t {
	case tensor.Q4_K:
		return gemmQ4Kx16VNNI, gemmQ4Kx8VNNI
	case tensor.Q6_K:
		return gemmQ6Kx16VNNI, gemmQ6Kx8VNNI
	case tensor.Q5_K:
		return gemmQ5Kx16VNNI, g8
	case tensor.Q4_0:
		return gemmQ40x16VNNI, g8
	case tensor.Q4_1:
		return gemmQ41x16VNNI, g8
	case tensor.Q5_0:
		return gemmQ50x16VNNI, gemmQ50x8VNNI
	case tensor.Q5_1:
		return gemmQ51x16VNNI, gemmQ51x8VNNI
	}
	return nil, g8
}

// vnniTwins returns the VNNI twins of the one-, two- and four-token
// kernels q1, q2 and q4 of weights of type t where there are some (Q8_0,
// Q4_0 and the K-quants), else q1, q2 and q4.
func vnniTwins(t tensor.DType, q1 quantX1, q2, q4 quantX4) (quantX1, quantX4, quantX4) {
	switch t {
	case tensor.Q8_0:
		return matQ8x1VNNI, matQ8x2VNNI, matQ8x4VNNI
	case tensor.Q4_0:
		return matQ4x1VNNI, matQ4x2VNNI, matQ4x4VNNI
	case tensor.Q4_K:
		return matQ4Kx1VNNI, matQ4Kx2VNNI, matQ4Kx4VNNI
	case tensor.Q5_K:
		return matQ5Kx1VNNI, matQ5Kx2VNNI, matQ5Kx4VNNI
	case tensor.Q6_K:
		return matQ6Kx1VNNI, matQ6Kx2VNNI, matQ6Kx4VNNI
	case tensor.Q3_K:
		return matQ3Kx1VNNI, matQ3Kx2VNNI, matQ3Kx4VNNI
	case tensor.Q2_K:
		return matQ2Kx1VNNI, matQ2Kx2VNNI, matQ2Kx4VNNI
	}
	return q1, q2, q4
}
