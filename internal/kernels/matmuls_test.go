package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// MatMuls must give every product exactly what its own MatMul gives, for
// mixed types and row counts, on one thread and several, small and large.
func TestMatMulsMatchesMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, threads := range []int{1, 2, 3} {
		p := NewPool(threads)
		for _, n := range []int{1, 3, 8} {
			for _, cols := range []int{64, 768} {
				var ps []Product
				var want [][]float32
				for _, sh := range []struct {
					typ  tensor.DType
					rows int
				}{{tensor.Q8_0, 768}, {tensor.F32, 40}, {tensor.Q4_0, 256}, {tensor.F16, 17}} {
					w, _ := randMatrix(t, rng, sh.typ, sh.rows, cols)
					ps = append(ps, Product{W: w, Out: make([]float32, n*sh.rows)})
					want = append(want, make([]float32, n*sh.rows))
				}
				x := randFloats(rng, n*cols)
				for k, pr := range ps {
					p.MatMul(want[k], pr.W, x, n)
				}
				p.MatMuls(x, n, ps)
				for k, pr := range ps {
					if i := firstBitDiff(pr.Out, want[k]); i >= 0 {
						t.Fatalf("threads %d n %d cols %d: product %d (%s) value %d = %v, MatMul %v",
							threads, n, cols, k, pr.W.Type, i, pr.Out[i], want[k][i])
					}
				}
			}
		}
		p.Close()
	}
}

func TestMatMulsPanicsOnMismatch(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	a, _ := randMatrix(t, rng, tensor.F32, 4, 64)
	b, _ := randMatrix(t, rng, tensor.F32, 4, 32)
	for name, ps := range map[string][]Product{
		"columns":   {{W: a, Out: make([]float32, 4)}, {W: b, Out: make([]float32, 4)}},
		"short out": {{W: a, Out: make([]float32, 3)}},
		"too many":  {{W: a, Out: make([]float32, 4)}, {W: a, Out: make([]float32, 4)}, {W: a, Out: make([]float32, 4)}, {W: a, Out: make([]float32, 4)}, {W: a, Out: make([]float32, 4)}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			p.MatMuls(make([]float32, 64), 1, ps)
		}()
	}
}
