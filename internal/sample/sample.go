// Package sample picks the next token from a model's logits: greedy,
// temperature, top-k and top-p (nucleus), with a seeded generator so that a
// run with the same seed reproduces its text.
//
// A Sampler belongs to one request. It never shares random state between
// requests, so one tenant's traffic cannot shift another tenant's samples.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Params are a request's sampling settings. The zero value is greedy.
type Params struct {
	// Temperature 0 means greedy (argmax). Higher values flatten the
	// distribution.
	Temperature float32
	// TopK keeps only the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// adds up to at least TopP; 0 or 1 keeps all.
	TopP float32
	// Seed seeds the generator.
	Seed uint64
}

// Validate reports settings that cannot be honoured.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(float64(p.Temperature)) || p.Temperature < 0 || p.Temperature > 100:
		return fmt.Errorf("temperature %v is outside [0, 100]", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d is negative", p.TopK)
	case math.IsNaN(float64(p.TopP)) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v is outside [0, 1]", p.TopP)
	}
	return nil
}

// Sampler draws tokens for one sequence.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	idx  []int
	prob []float32
}

// New returns a Sampler for p.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}
}

// Greedy returns the index of the largest logit; ties go to the lowest
// index, as in the reference implementation.
func Greedy(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Skip advances the generator past n draws as if Next had been called n
// times, so a decode server continues the random stream of a request whose
// first token was sampled by its prefill server.
func (s *Sampler) Skip(n int) {
	if s.p.Temperature == 0 {
		return // greedy draws nothing
	}
	for ; n > 0; n-- {
		s.rng.Float32()
	}
}

// Next picks a token from logits. It may reorder a scratch copy but leaves
// logits untouched.
func (s *Sampler) Next(logits []float32) int {
	if s.p.Temperature == 0 {
		return Greedy(logits)
	}
	n := len(logits)
	if cap(s.idx) < n {
		s.idx = make([]int, n)
		s.prob = make([]float32, n)
	}
	idx, prob := s.idx[:n], s.prob[:n]
	// Softmax with temperature, in float64 for a stable sum.
	maxv := logits[Greedy(logits)]
	var sum float64
	for i, v := range logits {
		e := math.Exp(float64((v - maxv) / s.p.Temperature))
		prob[i] = float32(e)
		sum += e
		idx[i] = i
	}
	for i := range prob {
		prob[i] = float32(float64(prob[i]) / sum)
	}
	keep := n
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
	var total float32
	for _, i := range idx[:keep] {
		total += prob[i]
	}
	r := s.rng.Float32() * total
	var c float32
	for _, i := range idx[:keep] {
		c += prob[i]
		if r < c {
			return i
		}
	}
	return idx[keep-1]
}
