//go:build amd64 && !purego

package kernels

import "unsafe"

// The batched Q8_0 path (gemm_q8_amd64.s): eight tokens at a time, their
// activations interleaved into a stack buffer so that one register holds
// one weight row's value for all eight.

// xiBlock is the size of one interleaved block of eight tokens.
const xiBlock = 576

// gemmMaxBlocks bounds the columns (in blocks of 32) the batched kernel
// takes, so that the interleave buffer (gemmMaxBlocks·xiBlock bytes, 72 KiB)
// fits on the stack; wider matrices take the four-row kernels.
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
// (which the kernel's sign trick cannot take), the four-row kernels.
func gemmQ8Rows(w *Matrix, r0, r1, tile int, xq []byte, n int, out []float32, ostride int) {
	nb := w.Cols / 32
	rb := nb * 34
	xs := nb * xBlockBytes
	var xi [gemmMaxBlocks * xiBlock]byte
	var toks [8]unsafe.Pointer
	for t0 := r0; t0 < r1; t0 += tile {
		rows := min(tile, r1-t0)
		wp := unsafe.Pointer(&w.Data[t0*rb])
		i := 0
		if w.minFree || !q8HasMin(wp, rows*nb) {
			for ; n-i >= gemmMinTokens; i += 8 {
				ntok := min(8, n-i)
				for t := range toks {
					if t < ntok {
						toks[t] = unsafe.Pointer(&xq[(i+t)*xs])
					} else {
						toks[t] = unsafe.Pointer(&zeroBlocks[0])
					}
				}
				qInterleave8(unsafe.Pointer(&xi[0]), &toks, nb)
				gemmQ8x8(wp, rb, rows, unsafe.Pointer(&xi[0]), nb, &out[i*ostride+t0], ostride*4, ntok)
			}
			i = min(i, n)
		}
		quantTile(matQ8x1, matQ8x2, matQ8x4, wp, rb, rows, xq, nb, i, n, out[t0:], ostride)
	}
}

func hasQ8MinSIMD(data []byte) bool {
	if len(data) < 34 {
		return false
	}
	return q8HasMin(unsafe.Pointer(&data[0]), len(data)/34)
}
