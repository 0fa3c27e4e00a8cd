//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// q6k16Run multiplies every row of w by the ntok (9..16) tokens of xq,
// interleaved as gemmKRows has them, either through gemmQ6Kx16VNNI or,
// with pair false, through gemmQ6Kx8 once per group of eight, and returns
// the results as gemmKVNNIRun does (vq8Out's canary between the rows).
func q6k16Run(pair bool, w *Matrix, xq []byte, ntok, ostride int) []float32 {
	nb := w.Cols / 32
	rb, _ := w.Type.RowBytes(w.Cols)
	xi := interleaveGroups(nil, xq, ntok, nb)
	xa, xb := unsafe.Pointer(&xi[0]), unsafe.Pointer(&xi[nb*xiBlock])
	wp := unsafe.Pointer(&w.Data[0])
	out := vq8Out(16 * ostride)
	if pair {
		gemmQ6Kx16VNNI(wp, rb, w.Rows, xa, xb, nb, &out[0], ostride*4, ntok)
	} else {
		gemmQ6Kx8(wp, rb, w.Rows, xa, nb, &out[0], ostride*4, 8)
		gemmQ6Kx8(wp, rb, w.Rows, xb, nb, &out[8*ostride], ostride*4, ntok-8)
	}
	return out
}

// gemmQ6Kx16VNNI must give the bits of gemmQ6Kx8 on each of its two
// groups, 13..16 tokens (the second group's missing tokens zero blocks).
func TestGemmQ6K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	q6kVNNISweep(t, rand.New(rand.NewPCG(95, 96)), 13, 16, q6k16Run)
}

// gemmQ6Kx8VNNI must give gemmQ6Kx8's bits on the same interleaved
// activations, 5..8 tokens.
func TestGemmQ6KVNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	q6kVNNISweep(t, rand.New(rand.NewPCG(97, 98)), 5, 8, func(vnni bool, w *Matrix, xq []byte, ntok, ostride int) []float32 {
		if vnni {
			return gemmKVNNIRun(gemmQ6Kx8VNNI, w, xq, ntok, ostride)
		}
		return gemmKVNNIRun(gemmQ6Kx8, w, xq, ntok, ostride)
	})
}

// q6kVNNISweep is q4kVNNISweep for Q6_K: run must give the same bits with
// vnni true (a VNNI Q6_K batched kernel) and false (gemmQ6Kx8) for
// ntok0..ntok1 tokens, on partial and whole groups of four rows and
// several groups, one to five superblocks, weights quantised from random
// data and kqWeights' extremes (quants 0 and 63, scales ±127), against
// kqActivations' extremes (-128 included, which the sub-blocks' 32·Σx
// must take exactly too) and quantised activations.
func q6kVNNISweep(t *testing.T, rng *rand.Rand, ntok0, ntok1 int, run func(vnni bool, w *Matrix, xq []byte, ntok, ostride int) []float32) {
	t.Helper()
	written, finite := 0, 0
	for _, rows := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33} {
		for _, sbs := range []int{1, 2, 3, 5} {
			cols := sbs * 256
			nb := cols / 32
			quantised, _ := randMatrix(t, rng, tensor.Q6_K, rows, cols)
			for wk, w := range []*Matrix{quantised, kqWeights(rng, tensor.Q6_K, rows, cols)} {
				for ntok := ntok0; ntok <= ntok1; ntok++ {
					for ak, xq := range [][]byte{kqActivations(rng, ntok, nb), vq8Activations(rng, ntok, nb)} {
						ostride := rows + 3
						want := run(false, w, xq, ntok, ostride)
						got := run(true, w, xq, ntok, ostride)
						wr, fi := vq8Same(t, fmt.Sprintf("rows=%d cols=%d weights=%d acts=%d ntok=%d", rows, cols, wk, ak, ntok), got, want)
						if wr != rows*ntok {
							t.Fatalf("rows=%d ntok=%d: %d results written, want %d", rows, ntok, wr, rows*ntok)
						}
						written += wr
						finite += fi
					}
				}
			}
		}
	}
	vq8Finite(t, written, finite)
}

// BenchmarkGemmQ6K16VNNI compares two calls of gemmQ6Kx8 (the AVX2
// kernel Q6_K's batched products take today) with one of gemmQ6Kx16VNNI
// on sixteen tokens, alternating in one run (the machine's load varies
// between runs), one thread, on matrices of 420 KiB.
func BenchmarkGemmQ6K16VNNI(b *testing.B) {
	for _, sh := range [][2]int{{512, 1024}, {256, 2048}} {
		rows, cols := sh[0], sh[1]
		w := benchMatrix(b, tensor.Q6_K, rows, cols)
		nb := cols / 32
		rb, _ := tensor.Q6_K.RowBytes(cols)
		rng := rand.New(rand.NewPCG(2, 3))
		xq := make([]byte, 16*nb*xBlockBytes)
		x := randFloats(rng, 16*cols)
		for i := range 16 {
			quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
		}
		xi := interleaveGroups(nil, xq, 16, nb)
		wp := unsafe.Pointer(&w.Data[0])
		xa, xb := unsafe.Pointer(&xi[0]), unsafe.Pointer(&xi[nb*xiBlock])
		out := make([]float32, 16*rows)
		x8 := func() {
			gemmQ6Kx8(wp, rb, rows, xa, nb, &out[0], rows*4, 8)
			gemmQ6Kx8(wp, rb, rows, xb, nb, &out[8*rows], rows*4, 8)
		}
		x16 := func() { gemmQ6Kx16VNNI(wp, rb, rows, xa, xb, nb, &out[0], rows*4, 16) }
		for _, k := range []struct {
			name string
			run  func()
		}{{"avx2x2", x8}, {"x16", x16}, {"avx2x2#2", x8}, {"x16#2", x16}} {
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, k.name), func(b *testing.B) {
				if !hasVNNI {
					b.Skip("no AVX-512 VNNI on this CPU")
				}
				for b.Loop() {
					k.run()
				}
				b.ReportMetric(2*float64(rows*cols*16)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmQ6KVNNI compares gemmQ6Kx8 with gemmQ6Kx8VNNI on eight
// tokens, alternating in one run, one thread, on matrices of 420 KiB.
func BenchmarkGemmQ6KVNNI(b *testing.B) {
	for _, sh := range [][2]int{{512, 1024}, {256, 2048}} {
		rows, cols := sh[0], sh[1]
		w := benchMatrix(b, tensor.Q6_K, rows, cols)
		nb := cols / 32
		rb, _ := tensor.Q6_K.RowBytes(cols)
		rng := rand.New(rand.NewPCG(2, 3))
		xq := make([]byte, 8*nb*xBlockBytes)
		x := randFloats(rng, 8*cols)
		for i := range 8 {
			quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
		}
		xi := interleaveGroups(nil, xq, 8, nb)
		out := make([]float32, 8*rows)
		for _, k := range []struct {
			name string
			g8   gemmX8
		}{{"avx2", gemmQ6Kx8}, {"vnni", gemmQ6Kx8VNNI}, {"avx2#2", gemmQ6Kx8}, {"vnni#2", gemmQ6Kx8VNNI}} {
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, k.name), func(b *testing.B) {
				if !hasVNNI {
					b.Skip("no AVX-512 VNNI on this CPU")
				}
				for b.Loop() {
					k.g8(unsafe.Pointer(&w.Data[0]), rb, rows, unsafe.Pointer(&xi[0]), nb, &out[0], rows*4, 8)
				}
				b.ReportMetric(2*float64(rows*cols*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
