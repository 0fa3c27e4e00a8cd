package sample

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// referenceNext is Next as it was before candidates: the whole vocabulary
// sorted for every token under top-k or top-p, then cut. The softmax and
// the draw are unchanged and shared; the draws must not change.
func referenceNext(s *Sampler, logits []float32) int {
	if s.p.Temperature == 0 {
		return Greedy(logits)
	}
	idx, prob := s.softmax(logits)
	for i := range idx {
		idx[i] = i
	}
	n, keep := len(idx), len(idx)
	if s.p.TopK > 0 && s.p.TopK < n || s.p.TopP > 0 && s.p.TopP < 1 {
		sort.Slice(idx, func(a, b int) bool {
			pa, pb := prob[idx[a]], prob[idx[b]]
			if pa != pb {
				return pa > pb
			}
			return idx[a] < idx[b]
		})
		if s.p.TopK > 0 && s.p.TopK < keep {
			keep = s.p.TopK
		}
		if s.p.TopP > 0 && s.p.TopP < 1 {
			var c float32
			for i := 0; i < keep; i++ {
				c += prob[idx[i]]
				if c >= s.p.TopP {
					keep = i + 1
					break
				}
			}
		}
	}
	return s.draw(idx, prob, keep)
}

// TestCandidatesDrawAsTheFullSort: over peaked, flat, tied and tiny
// distributions and every mix of top-k and top-p, Next draws exactly the
// tokens the whole-vocabulary sort drew, seed for seed.
func TestCandidatesDrawAsTheFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func(n int) []float32{
		"peaked": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64() * 4)
			}
			return l
		},
		"flat": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64() * 0.01)
			}
			return l
		},
		// One token holds nearly all the mass: the top-p cut is the
		// first token, and the set above the spare exponent is small.
		"dominant": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64())
			}
			l[rng.IntN(n)] = 25
			return l
		},
		"ties": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.IntN(4))
			}
			return l
		},
	}
	for name, shape := range shapes {
		for _, n := range []int{3, 50, 4000} {
			for _, p := range []Params{
				{Temperature: 0.7, TopP: 0.9}, {Temperature: 1, TopP: 0.5}, {Temperature: 1.3, TopP: 0.999}, {Temperature: 1, TopP: 0.9999999},
				{Temperature: 0.8, TopK: 1}, {Temperature: 0.8, TopK: 40}, {Temperature: 1, TopK: 2, TopP: 0.6},
				{Temperature: 1, TopK: 40, TopP: 0.95}, {Temperature: 1}, {Temperature: 2, TopK: n + 5},
			} {
				t.Run(fmt.Sprintf("%s/n=%d/%+v", name, n, p), func(t *testing.T) {
					p.Seed = rng.Uint64()
					got, want := New(p), New(p)
					for step := 0; step < 20; step++ {
						logits := shape(n)
						if g, w := got.Next(logits), referenceNext(want, logits); g != w {
							t.Fatalf("step %d: drew %d, the full sort drew %d", step, g, w)
						}
					}
				})
			}
		}
	}
}

// BenchmarkNext: one draw over a 32,000-token vocabulary. Under top-p or
// top-k the whole-vocabulary sort took about 6 ms, more than a decode step.
//
//	go test -run '^$' -bench Next ./internal/sample/
func BenchmarkNext(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	for _, p := range []Params{{Temperature: 0.8}, {Temperature: 0.8, TopP: 0.9}, {Temperature: 0.8, TopK: 40}, {Temperature: 0.8, TopK: 40, TopP: 0.95}} {
		b.Run(fmt.Sprintf("%+v", p), func(b *testing.B) {
			s := New(p)
			for b.Loop() {
				s.Next(logits)
			}
		})
	}
}
