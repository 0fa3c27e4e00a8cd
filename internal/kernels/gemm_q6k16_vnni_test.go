//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmQ6Kx16VNNI must give the bits of gemmQ6Kx8 on each of its two
// groups, 13..16 tokens (the second group's missing tokens zero blocks).
func TestGemmQ6K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(95, 96)), tensor.Q6_K, 13, 16, pairRun(gemmQ6Kx16VNNI, gemmQ6Kx8))
}

// gemmQ6Kx8VNNI must give gemmQ6Kx8's bits on the same interleaved
// activations, 5..8 tokens.
func TestGemmQ6KVNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(97, 98)), tensor.Q6_K, 5, 8, eightRun(gemmQ6Kx8VNNI, gemmQ6Kx8))
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
