//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmKVNNIRun calls the eight-token kernel g8 on every row of w for the
// ntok tokens of xq, interleaved as gemmKRows has them, and returns the
// results, token t's row r at t·ostride+r; the values between the rows
// and ostride keep vq8Out's canary, so stray stores show.
func gemmKVNNIRun(g8 gemmX8, w *Matrix, xq []byte, ntok, ostride int) []float32 {
	nb := w.Cols / 32
	rb, _ := w.Type.RowBytes(w.Cols)
	xi := interleaveGroups(nil, xq, ntok, nb)
	out := vq8Out(8 * ostride)
	g8(unsafe.Pointer(&w.Data[0]), rb, w.Rows, unsafe.Pointer(&xi[0]), nb, &out[0], ostride*4, ntok)
	return out
}

// gemmQ4Kx8VNNI must give gemmQ4Kx8's bits on the same interleaved
// activations: every row count of a partial and whole group of four and
// several groups, one to five superblocks, 5..8 tokens, on weights both
// quantised from random data and kqWeights' extreme superblocks, against
// kqActivations' extremes (-128 included) and quantised activations.
func TestGemmQ4KVNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(91, 92)), tensor.Q4_K, 5, 8, eightRun(gemmQ4Kx8VNNI, gemmQ4Kx8))
}

// kVNNISweep demands that run give the same bits with vnni true (a VNNI
// batched kernel for weights of type typ) and false (the AVX2 one) for
// ntok0..ntok1 tokens: row counts of partial and whole groups of four and
// several groups, one to five superblocks, weights quantised from random
// data and kqWeights' extreme superblocks, activations kqActivations'
// extremes (-128 included) and quantised ones; run writes token t's row r
// at t·ostride+r, and must write exactly rows·ntok values.
func kVNNISweep(t *testing.T, rng *rand.Rand, typ tensor.DType, ntok0, ntok1 int, run func(vnni bool, w *Matrix, xq []byte, ntok, ostride int) []float32) {
	t.Helper()
	written, finite := 0, 0
	for _, rows := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33} {
		for _, sbs := range []int{1, 2, 3, 5} {
			cols := sbs * 256
			nb := cols / 32
			quantised, _ := randMatrix(t, rng, typ, rows, cols)
			for wk, w := range []*Matrix{quantised, kqWeights(rng, typ, rows, cols)} {
				for ntok := ntok0; ntok <= ntok1; ntok++ {
					for ak, xq := range [][]byte{kqActivations(rng, ntok, nb), vq8Activations(rng, ntok, nb)} {
						ostride := rows + 3
						want := run(false, w, xq, ntok, ostride)
						got := run(true, w, xq, ntok, ostride)
						wr, fi := vq8Same(t, fmt.Sprintf("%s rows=%d cols=%d weights=%d acts=%d ntok=%d", typ, rows, cols, wk, ak, ntok), got, want)
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

// eightRun is a kVNNISweep run for an eight-token VNNI kernel and its AVX2
// twin.
func eightRun(vnni8, avx8 gemmX8) func(bool, *Matrix, []byte, int, int) []float32 {
	return func(vnni bool, w *Matrix, xq []byte, ntok, ostride int) []float32 {
		if vnni {
			return gemmKVNNIRun(vnni8, w, xq, ntok, ostride)
		}
		return gemmKVNNIRun(avx8, w, xq, ntok, ostride)
	}
}

// pairRun is a kVNNISweep run for a sixteen-token VNNI kernel and the AVX2
// eight-token one: the ntok (13..16) tokens of xq interleaved as gemmKRows
// has them, through g16 once or through avx8 once per group of eight,
// with the results as gemmKVNNIRun returns them (vq8Out's canary between
// the rows).
func pairRun(g16 gemmX16, avx8 gemmX8) func(bool, *Matrix, []byte, int, int) []float32 {
	return func(pair bool, w *Matrix, xq []byte, ntok, ostride int) []float32 {
		nb := w.Cols / 32
		rb, _ := w.Type.RowBytes(w.Cols)
		xi := interleaveGroups(nil, xq, ntok, nb)
		xa, xb := unsafe.Pointer(&xi[0]), unsafe.Pointer(&xi[nb*xiBlock])
		wp := unsafe.Pointer(&w.Data[0])
		out := vq8Out(16 * ostride)
		if pair {
			g16(wp, rb, w.Rows, xa, xb, nb, &out[0], ostride*4, ntok)
		} else {
			avx8(wp, rb, w.Rows, xa, nb, &out[0], ostride*4, 8)
			avx8(wp, rb, w.Rows, xb, nb, &out[8*ostride], ostride*4, ntok-8)
		}
		return out
	}
}

// BenchmarkGemmQ4KVNNI compares gemmQ4Kx8 with gemmQ4Kx8VNNI on eight
// tokens in one run (the machine's load varies between runs), on two
// matrices of 864 KiB (in L3, not in L2) and on one tile's worth that
// stays in L2.
func BenchmarkGemmQ4KVNNI(b *testing.B) {
	benchKEight(b, tensor.Q4_K, [][2]int{{2048, 768}, {768, 2048}, {64, 2048}}, gemmQ4Kx8, gemmQ4Kx8VNNI)
}

// benchKInputs returns a rows×cols matrix of typ, its row bytes and
// block count, and n tokens' activations interleaved as gemmKRows has
// them (groups of eight, nb·xiBlock bytes each).
func benchKInputs(b *testing.B, typ tensor.DType, rows, cols, n int) (w *Matrix, rb, nb int, xi []byte) {
	w = benchMatrix(b, typ, rows, cols)
	nb = cols / 32
	rb, _ = typ.RowBytes(cols)
	x := randFloats(rand.New(rand.NewPCG(2, 3)), n*cols)
	xq := make([]byte, n*nb*xBlockBytes)
	for i := range n {
		quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
	}
	return w, rb, nb, interleaveGroups(nil, xq, n, nb)
}

// benchKRuns times each named run on a rows×cols product of n tokens, the
// list alternating so that the machine's drift falls on both, reporting
// GFLOP/s.
func benchKRuns(b *testing.B, rows, cols, n int, runs []benchKRun) {
	for _, k := range runs {
		b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, k.name), func(b *testing.B) {
			if !hasVNNI {
				b.Skip("no AVX-512 VNNI on this CPU")
			}
			for b.Loop() {
				k.run()
			}
			b.ReportMetric(2*float64(rows*cols*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// benchKRun is one of benchKRuns's contenders.
type benchKRun struct {
	name string
	run  func()
}

// benchKEight compares the eight-token kernels base and vnni on each
// shape.
func benchKEight(b *testing.B, typ tensor.DType, shapes [][2]int, base, vnni gemmX8) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		w, rb, nb, xi := benchKInputs(b, typ, rows, cols, 8)
		out := make([]float32, 8*rows)
		call := func(g8 gemmX8) func() {
			return func() { g8(unsafe.Pointer(&w.Data[0]), rb, rows, unsafe.Pointer(&xi[0]), nb, &out[0], rows*4, 8) }
		}
		benchKRuns(b, rows, cols, 8, []benchKRun{{"base", call(base)}, {"vnni", call(vnni)}, {"base#2", call(base)}, {"vnni#2", call(vnni)}})
	}
}

// benchKPair compares two calls of the eight-token kernel base with one
// of the sixteen-token kernel g16 on each shape.
func benchKPair(b *testing.B, typ tensor.DType, shapes [][2]int, base gemmX8, g16 gemmX16) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		w, rb, nb, xi := benchKInputs(b, typ, rows, cols, 16)
		wp := unsafe.Pointer(&w.Data[0])
		xa, xb := unsafe.Pointer(&xi[0]), unsafe.Pointer(&xi[nb*xiBlock])
		out := make([]float32, 16*rows)
		x8 := func() {
			base(wp, rb, rows, xa, nb, &out[0], rows*4, 8)
			base(wp, rb, rows, xb, nb, &out[8*rows], rows*4, 8)
		}
		x16 := func() { g16(wp, rb, rows, xa, xb, nb, &out[0], rows*4, 16) }
		benchKRuns(b, rows, cols, 16, []benchKRun{{"x8x2", x8}, {"x16", x16}, {"x8x2#2", x8}, {"x16#2", x16}})
	}
}

// BenchmarkGemmLegacyVNNI compares Q5_0's and Q5_1's eight-token kernels
// with their VNNI twins (BenchmarkGemmQ4KVNNI's shapes).
func BenchmarkGemmLegacyVNNI(b *testing.B) {
	shapes := [][2]int{{2048, 768}, {768, 2048}, {64, 2048}}
	for _, c := range []struct {
		t          tensor.DType
		base, vnni gemmX8
	}{
		{tensor.Q5_0, gemmQ50x8, gemmQ50x8VNNI},
		{tensor.Q5_1, gemmQ51x8, gemmQ51x8VNNI},
	} {
		b.Run(c.t.String(), func(b *testing.B) { benchKEight(b, c.t, shapes, c.base, c.vnni) })
	}
}

// BenchmarkGemmLegacy16VNNI compares two calls of the legacy types'
// eight-token kernels (VNNI where there is one) with one of their
// sixteen-token ones.
func BenchmarkGemmLegacy16VNNI(b *testing.B) {
	shapes := [][2]int{{2048, 768}, {768, 2048}}
	for _, c := range []struct {
		t    tensor.DType
		base gemmX8
		g16  gemmX16
	}{
		{tensor.Q4_0, gemmQ40x8, gemmQ40x16VNNI},
		{tensor.Q4_1, gemmQ41x8, gemmQ41x16VNNI},
		{tensor.Q5_0, gemmQ50x8VNNI, gemmQ50x16VNNI},
		{tensor.Q5_1, gemmQ51x8VNNI, gemmQ51x16VNNI},
	} {
		b.Run(c.t.String(), func(b *testing.B) { benchKPair(b, c.t, shapes, c.base, c.g16) })
	}
}
