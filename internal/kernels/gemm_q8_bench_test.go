//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

func BenchmarkGemmQ8Kernel(b *testing.B) {
	rows, cols := 128, 768
	w := benchMatrix(b, tensor.Q8_0, rows, cols)
	nb := cols / 32
	x := randFloats(rand.New(rand.NewPCG(2, 3)), 8*cols)
	xq := make([]byte, 8*nb*xBlockBytes)
	for i := 0; i < 8; i++ {
		quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
	}
	xi := make([]byte, nb*xiBlock)
	var toks [8]unsafe.Pointer
	for t := range toks {
		toks[t] = unsafe.Pointer(&xq[t*nb*xBlockBytes])
	}
	qInterleave8(unsafe.Pointer(&xi[0]), &toks, nb)
	out := make([]float32, 8*rows)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			gemmQ8x8(unsafe.Pointer(&w.Data[0]), nb*34, rows, unsafe.Pointer(&xi[0]), nb, &out[0], rows*4, 8)
		}
		b.ReportMetric(2*float64(rows*cols*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("vnni", func(b *testing.B) {
		if !hasVNNI {
			b.Skip("no AVX-512 VNNI on this CPU")
		}
		for b.Loop() {
			gemmQ8x8VNNI(unsafe.Pointer(&w.Data[0]), nb*34, rows, unsafe.Pointer(&xi[0]), nb, &out[0], rows*4, 8)
		}
		b.ReportMetric(2*float64(rows*cols*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("vnni16", func(b *testing.B) {
		if !hasVNNI {
			b.Skip("no AVX-512 VNNI on this CPU")
		}
		// The same eight tokens twice, as sixteen: the rate per token
		// is what compares with vnni's. One tile, so the prefetch goes to
		// the next group, as vnni's does.
		sums := make([]int32, (rows+3)/4*8*nb)
		out16 := make([]float32, 16*rows)
		for b.Loop() {
			q8NegSums(unsafe.Pointer(&w.Data[0]), nb*34, rows, nb, &sums[0])
			gemmQ8x16VNNI(unsafe.Pointer(&w.Data[0]), nb*34, rows, unsafe.Pointer(&xi[0]), unsafe.Pointer(&xi[0]), nb, &out16[0], rows*4, 16, &sums[0], 4*nb*34)
		}
		b.ReportMetric(2*float64(rows*cols*16)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("old-x4", func(b *testing.B) {
		for b.Loop() {
			matQ8x4(unsafe.Pointer(&w.Data[0]), nb*34, rows, unsafe.Pointer(&xq[0]), nb*xBlockBytes, nb, &out[0], rows*4)
			matQ8x4(unsafe.Pointer(&w.Data[0]), nb*34, rows, unsafe.Pointer(&xq[4*nb*xBlockBytes]), nb*xBlockBytes, nb, &out[4*rows], rows*4)
		}
		b.ReportMetric(2*float64(rows*cols*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("interleave", func(b *testing.B) {
		for b.Loop() {
			qInterleave8(unsafe.Pointer(&xi[0]), &toks, nb)
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			q8HasMin(unsafe.Pointer(&w.Data[0]), rows*nb)
		}
	})
}

// BenchmarkGemmQ8 compares the eight-token kernel with the four-row kernels
// in one run (the machine's load varies between runs).
func BenchmarkGemmQ8(b *testing.B) {
	for _, sh := range [][3]int{{768, 768, 64}, {2048, 768, 64}, {768, 2048, 64}, {768, 768, 8}, {32000, 768, 8}, {768, 768, 32}} {
		w := benchMatrix(b, tensor.Q8_0, sh[0], sh[1])
		n := sh[2]
		x := randFloats(rand.New(rand.NewPCG(2, 3)), n*sh[1])
		out := make([]float32, n*sh[0])
		for _, th := range []int{1, 2} {
			for _, gemm := range []bool{false, true} {
				name := map[bool]string{false: "old", true: "new"}[gemm]
				b.Run(fmt.Sprintf("%dx%d/n=%d/threads=%d/%s", sh[0], sh[1], n, th, name), func(b *testing.B) {
					defer func() { useGemm = true }()
					useGemm = gemm
					p := NewPool(th)
					defer p.Close()
					p.MatMul(out, w, x, n)
					for b.Loop() {
						p.MatMul(out, w, x, n)
					}
					flops := 2 * float64(sh[0]) * float64(sh[1]) * float64(n) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
