package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// benchMatrix builds a rows×cols matrix from 64 random encoded rows repeated:
// real, distinct memory to stream, without quantising millions of values.
func benchMatrix(b *testing.B, typ tensor.DType, rows, cols int) *Matrix {
	rng := rand.New(rand.NewPCG(1, uint64(rows)))
	rb, _ := typ.RowBytes(cols)
	data := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		if r < 64 {
			if err := tensor.Quantize(typ, data[r*rb:r*rb+rb], randFloats(rng, cols)); err != nil {
				b.Fatal(err)
			}
			continue
		}
		copy(data[r*rb:r*rb+rb], data[(r%64)*rb:])
	}
	return &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

var benchShapes = [][2]int{{768, 768}, {2048, 768}, {32000, 768}}

// BenchmarkMatVec is one decode token: it reads every weight once, so its
// bytes per second is the figure to compare with BenchmarkReadBandwidth.
func BenchmarkMatVec(b *testing.B) {
	for _, typ := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0} {
		for _, sh := range benchShapes {
			w := benchMatrix(b, typ, sh[0], sh[1])
			x := randFloats(rand.New(rand.NewPCG(2, 3)), sh[1])
			out := make([]float32, sh[0])
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d", typ, sh[0], sh[1], th), func(b *testing.B) {
					p := NewPool(th)
					defer p.Close()
					p.MatMul(out, w, x, 1) // grow the scratch before timing
					b.SetBytes(int64(len(w.Data)))
					b.ReportAllocs()
					for b.Loop() {
						p.MatMul(out, w, x, 1)
					}
				})
			}
		}
	}
}

// BenchmarkMatMul is prefill: 64 tokens against the same weights, which
// should be bound by arithmetic, not memory.
func BenchmarkMatMul(b *testing.B) {
	benchMatMul(b, 64, []tensor.DType{tensor.F32, tensor.F16, tensor.Q8_0, tensor.Q4_0}, benchShapes[:2])
}

// BenchmarkDecodeBatch is a decode step of eight sequences: small enough
// that the weights of a large matrix still come from memory, large enough
// that each block loaded must serve several tokens.
func BenchmarkDecodeBatch(b *testing.B) {
	benchMatMul(b, 8, []tensor.DType{tensor.F32, tensor.Q8_0, tensor.Q4_0}, [][2]int{{768, 768}, {32000, 768}})
}

// BenchmarkDecodeFew is a decode step of two and of three sequences on a
// matrix far larger than the caches: still bound by memory, so the
// strided kernels read each tile once from memory and again from L2 for
// the later tokens.
func BenchmarkDecodeFew(b *testing.B) {
	for _, n := range []int{2, 3} {
		benchMatMul(b, n, []tensor.DType{tensor.F32, tensor.F16, tensor.Q8_0}, [][2]int{{32000, 768}})
	}
}

// benchMatMul times MatMul of n tokens for every type, shape and 1 or 2
// threads, reporting GFLOP/s.
func benchMatMul(b *testing.B, n int, types []tensor.DType, shapes [][2]int) {
	for _, typ := range types {
		for _, sh := range shapes {
			w := benchMatrix(b, typ, sh[0], sh[1])
			x := randFloats(rand.New(rand.NewPCG(2, 3)), n*sh[1])
			out := make([]float32, n*sh[0])
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%dx%d/n=%d/threads=%d", typ, sh[0], sh[1], n, th), func(b *testing.B) {
					p := NewPool(th)
					defer p.Close()
					p.MatMul(out, w, x, n) // grow the scratch before timing
					b.ReportAllocs()
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

func BenchmarkDot(b *testing.B) {
	for _, n := range []int{64, 768, 4096} {
		x := randFloats(rand.New(rand.NewPCG(4, 5)), 2*n)
		b.Run(fmt.Sprintf("len=%d", n), func(b *testing.B) {
			b.SetBytes(int64(8 * n))
			b.ReportAllocs()
			var s float32
			for b.Loop() {
				s += Dot(x[:n], x[n:])
			}
			sink = s
		})
	}
}

var sink float32

// BenchmarkReadBandwidth sums a 256 MiB array split over 1 or 2 goroutines:
// the memory read bandwidth MatVec should approach.
func BenchmarkReadBandwidth(b *testing.B) {
	buf := make([]uint64, 32<<20)
	for i := range buf {
		buf[i] = uint64(i)
	}
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) {
			b.SetBytes(int64(8 * len(buf)))
			var total uint64
			for b.Loop() {
				var wg sync.WaitGroup
				sums := make([]uint64, th*8)
				part := len(buf) / th
				for k := 0; k < th; k++ {
					wg.Add(1)
					go func(k int) {
						defer wg.Done()
						sums[k*8] = sumWords(buf[k*part : (k+1)*part])
					}(k)
				}
				wg.Wait()
				total += sums[0]
			}
			sink = float32(total)
		})
	}
}

func sumWords(v []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(v); i += 8 {
		s0 += v[i]
		s1 += v[i+1]
		s2 += v[i+2]
		s3 += v[i+3]
		s4 += v[i+4]
		s5 += v[i+5]
		s6 += v[i+6]
		s7 += v[i+7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// BenchmarkPoolOverhead is a MatMul just above the size where the workers
// are used: the gap between threads=1 and threads=2 is the cost of waking
// them and waiting for them.
func BenchmarkPoolOverhead(b *testing.B) {
	w := benchMatrix(b, tensor.F32, 128, 512)
	x := make([]float32, 512)
	out := make([]float32, 128)
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) {
			p := NewPool(th)
			defer p.Close()
			b.ReportAllocs()
			for b.Loop() {
				p.MatMul(out, w, x, 1)
			}
		})
	}
}
