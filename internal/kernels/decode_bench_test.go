package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// BenchmarkDecodeMatrices runs the matrix products of one decode step of
// the 110M shape in Q8_0 (12 layers of query/key/value, output, gate/up and
// down products, then the 32000-row classifier: 116 MB of weights, far
// more than the caches) in the order and grouping the forward pass uses.
// Its bytes per second, next to BenchmarkReadBandwidth's, is how close the
// matrix products alone come to the memory-bandwidth bound; the forward
// pass adds attention and the small per-token operations on top. Steps of
// two to four tokens (sequences decoding together) read the weights once
// each too; their bytes per second count the weights once, so a step that
// stays bound by memory shows the one-token figure.
//
//	go test -run '^$' -bench DecodeMatrices ./internal/kernels/
func BenchmarkDecodeMatrices(b *testing.B) {
	const layers, dim, hidden, vocab = 12, 768, 2048, 32000
	type layer struct{ q, k, v, o, gate, up, down *Matrix }
	ls := make([]layer, layers)
	bytes := 0
	for i := range ls {
		ls[i] = layer{
			q: benchMatrix(b, tensor.Q8_0, dim, dim), k: benchMatrix(b, tensor.Q8_0, dim, dim),
			v: benchMatrix(b, tensor.Q8_0, dim, dim), o: benchMatrix(b, tensor.Q8_0, dim, dim),
			gate: benchMatrix(b, tensor.Q8_0, hidden, dim), up: benchMatrix(b, tensor.Q8_0, hidden, dim),
			down: benchMatrix(b, tensor.Q8_0, dim, hidden),
		}
		for _, m := range []*Matrix{ls[i].q, ls[i].k, ls[i].v, ls[i].o, ls[i].gate, ls[i].up, ls[i].down} {
			bytes += len(m.Data)
		}
	}
	cls := benchMatrix(b, tensor.Q8_0, vocab, dim)
	bytes += len(cls.Data)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 3, 4} {
		x := randFloats(rng, n*hidden)
		q, k, v, o := make([]float32, n*dim), make([]float32, n*dim), make([]float32, n*dim), make([]float32, n*dim)
		g, u := make([]float32, n*hidden), make([]float32, n*hidden)
		logits := make([]float32, n*vocab)
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("tokens=%d/threads=%d", n, th), func(b *testing.B) {
				p := NewPool(th)
				defer p.Close()
				qkv := []Product{{Out: q}, {Out: k}, {Out: v}}
				gu := []Product{{Out: g}, {Out: u}}
				b.SetBytes(int64(bytes))
				b.ReportAllocs()
				for b.Loop() {
					for i := range ls {
						l := &ls[i]
						qkv[0].W, qkv[1].W, qkv[2].W = l.q, l.k, l.v
						p.MatMuls(x[:n*dim], n, qkv)
						p.MatMul(o, l.o, x[:n*dim], n)
						gu[0].W, gu[1].W = l.gate, l.up
						p.MatMuls(x[:n*dim], n, gu)
						p.MatMul(o, l.down, x[:n*hidden], n)
					}
					p.MatMul(logits, cls, x[:n*dim], n)
				}
			})
		}
	}
}
