//go:build amd64 && !purego

package kernels

import "unsafe"

// The batched Q8_0 path (gemm_q8_amd64.s): eight tokens at a time, their
// activations interleaved into a stack buffer so that one register holds
// one weight row's value for all eight.

// xiBlock is the size of one interleaved block of eight tokens.
const xiBlock = 576

// gemmMaxBlocks bounds the columns (in blocks of 32) the batched kernel
// takes (interleaved, 72 KiB per group of eight tokens); wider matrices
// take the four-row kernels.
const gemmMaxBlocks = 128

// gemmMinTokens is the fewest tokens worth an eight-token pass: below it
// the idle lanes cost more than the four-row kernels do.
const gemmMinTokens = 5

// zeroBlocks stands in for the missing tokens of a partial group of eight:
// scale 0 and values 0, so their lanes compute zeros that are never stored.
var zeroBlocks [gemmMaxBlocks * xBlockBytes]byte

// useGemm enables the eight-token kernel. Benchmarks clear it to measure
// the four-row kernels in the same run; results are the same either way.
var useGemm = true

//go:noescape
func qInterleave8(dst unsafe.Pointer, toks *[8]unsafe.Pointer, nb int)

//go:noescape
func q8HasMin(p unsafe.Pointer, blocks int) bool

//go:noescape
func gemmQ8x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmQ8Rows is matRowsSIMD for Q8_0 weights and at least gemmMinTokens
// tokens: tile by tile, groups of eight tokens (the last one partial if it
// holds at least gemmMinTokens) take the eight-token kernel, and the
// tokens left over, or every token of a tile holding a weight of -128
// (which the AVX2 kernel's sign trick cannot take), the four-row kernels
// q1, q2 and q4. With VNNI, gemmQ8RowsVNNI does it instead, pairs of
// groups as sixteen tokens, through st (x16Stores; unused on AVX2). xi
// holds the groups' interleaved activations (interleaveGroups); nil has
// them interleaved here.
func gemmQ8Rows(w *Matrix, r0, r1, tile int, xq, xi []byte, n int, out []float32, ostride int, q1 quantX1, q2, q4 quantX4, st *x16Stores) {
	nb := w.Cols / 32
	if xi == nil {
		xi = interleaveGroups(nil, xq, n, nb)
	}
	if vnniOn() {
		gemmQ8RowsVNNI(w, r0, r1, tile, xq, xi, n, out, ostride, q1, q2, q4, st)
		return
	}
	rb := nb * 34
	for t0 := r0; t0 < r1; t0 += tile {
		rows := min(tile, r1-t0)
		wp := unsafe.Pointer(&w.Data[t0*rb])
		i := 0
		if w.minFree || !q8HasMin(wp, rows*nb) {
			for g := 0; n-i >= gemmMinTokens; i, g = i+8, g+1 {
				gemmQ8x8(wp, rb, rows, unsafe.Pointer(&xi[g*nb*xiBlock]), nb, &out[i*ostride+t0], ostride*4, min(8, n-i))
			}
			i = min(i, n)
		}
		quantTile(q1, q2, q4, wp, rb, rows, xq, nb, i, n, out[t0:], ostride)
	}
}

// interleaveGroups lays out the quantised activations xq of n tokens (nb
// blocks each) for the eight-token kernel, one group of eight after
// another, for every group the kernel takes (those holding at least
// gemmMinTokens tokens; missing tokens of the last are zeros). It reuses
// dst when it is large enough. A MatMul does it once, before its threads
// start, rather than each thread once per tile.
func interleaveGroups(dst, xq []byte, n, nb int) []byte {
	groups := 0
	for i := 0; n-i >= gemmMinTokens; i += 8 {
		groups++
	}
	need := groups * nb * xiBlock
	if cap(dst) < need {
		dst = make([]byte, need)
	}
	dst = dst[:need]
	xs := nb * xBlockBytes
	var toks [8]unsafe.Pointer
	for g := range groups {
		i := 8 * g
		for t := range toks {
			if i+t < n {
				toks[t] = unsafe.Pointer(&xq[(i+t)*xs])
			} else {
				toks[t] = unsafe.Pointer(&zeroBlocks[0])
			}
		}
		qInterleave8(unsafe.Pointer(&dst[g*nb*xiBlock]), &toks, nb)
	}
	return dst
}

// gemmInterleave returns xq interleaved for the eight-token kernels when a
// MatMul of ps over n tokens will use one (a product whose weights
// hasGemm takes), reusing dst; else nil.
func gemmInterleave(dst []byte, ps []Product, xq []byte, n int) []byte {
	if !useSIMD || !useGemm || n < gemmMinTokens {
		return nil
	}
	nb := ps[0].W.Cols / 32
	if nb == 0 || nb > gemmMaxBlocks {
		return nil
	}
	for _, pr := range ps {
		if hasGemm(pr.W.Type) {
			return interleaveGroups(dst, xq, n, nb)
		}
	}
	return nil
}

func hasQ8MinSIMD(data []byte) bool {
	if len(data) < 34 {
		return false
	}
	return q8HasMin(unsafe.Pointer(&data[0]), len(data)/34)
}
