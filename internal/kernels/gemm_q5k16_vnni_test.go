//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmQ5Kx16VNNI must give the bits of gemmQ5Kx8 on each of its two
// groups: partial and whole groups of four rows and several groups, one
// to five superblocks, 13..16 tokens (the second group's missing tokens
// zero blocks), on quantised and kqWeights' extreme weights, against
// kqActivations' extremes and quantised activations.
func TestGemmQ5K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(99, 100)), tensor.Q5_K, 13, 16, pairRun(gemmQ5Kx16VNNI, gemmQ5Kx8))
}

// BenchmarkGemmQ5K16VNNI compares two calls of gemmQ5Kx8 with one of
// gemmQ5Kx16VNNI on sixteen tokens, alternating in one run (the
// machine's load varies between runs), on matrices of 352 KiB.
func BenchmarkGemmQ5K16VNNI(b *testing.B) {
	for _, sh := range [][2]int{{512, 1024}, {256, 2048}} {
		rows, cols := sh[0], sh[1]
		w := benchMatrix(b, tensor.Q5_K, rows, cols)
		nb := cols / 32
		rb, _ := tensor.Q5_K.RowBytes(cols)
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
			gemmQ5Kx8(wp, rb, rows, xa, nb, &out[0], rows*4, 8)
			gemmQ5Kx8(wp, rb, rows, xb, nb, &out[8*rows], rows*4, 8)
		}
		x16 := func() { gemmQ5Kx16VNNI(wp, rb, rows, xa, xb, nb, &out[0], rows*4, 16) }
		for _, k := range []struct {
			name string
			run  func()
		}{{"x8x2", x8}, {"x16", x16}, {"x8x2#2", x8}, {"x16#2", x16}} {
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
