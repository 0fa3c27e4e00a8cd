// Package sample picks the next token from a model's logits: greedy,
// temperature, top-k and top-p (nucleus), after a request's logit biases
// and presence and frequency penalties, with a seeded generator so that a
// run with the same seed reproduces its text.
//
// A Sampler belongs to one request. It never shares random state between
// requests, so one tenant's traffic cannot shift another tenant's samples.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
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
	// PresencePenalty is taken off the logit of every token the sequence
	// has generated at least once, and FrequencyPenalty once for each
	// time it generated it (OpenAI's presence_penalty and
	// frequency_penalty, each in [-2, 2]). Only generated tokens count,
	// not the prompt's, as in OpenAI's definition and vLLM.
	PresencePenalty, FrequencyPenalty float32
	// LogitBias is added to the logits of the tokens it names before
	// anything else (OpenAI's logit_bias), in order of token, each token
	// once, each bias in [-100, 100]. A token past the logits is ignored:
	// the API refuses one outside its tokenizer's vocabulary.
	LogitBias []Bias
	// Logprobs asks for each generated token's Logprobs, with the
	// TopLogprobs most likely tokens (0 to MaxTopLogprobs) beside it. They
	// change nothing in the draw.
	Logprobs    bool
	TopLogprobs int
}

// Bias is one token's entry in Params.LogitBias.
type Bias struct {
	Token int
	Bias  float32
}

// adjusts reports whether p changes logits before the draw.
func (p Params) adjusts() bool {
	return p.PresencePenalty != 0 || p.FrequencyPenalty != 0 || len(p.LogitBias) > 0
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
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("presence_penalty %v is outside [-2, 2]", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("frequency_penalty %v is outside [-2, 2]", p.FrequencyPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("top_logprobs %d is outside [0, %d]", p.TopLogprobs, MaxTopLogprobs)
	case p.TopLogprobs > 0 && !p.Logprobs:
		return fmt.Errorf("top_logprobs %d without logprobs", p.TopLogprobs)
	}
	for i, b := range p.LogitBias {
		switch {
		case b.Token < 0:
			return fmt.Errorf("logit_bias token %d is negative", b.Token)
		case i > 0 && b.Token <= p.LogitBias[i-1].Token:
			return fmt.Errorf("logit_bias tokens are not in increasing order: %d after %d", b.Token, p.LogitBias[i-1].Token)
		case !(b.Bias >= -100 && b.Bias <= 100):
			return fmt.Errorf("logit_bias of token %d is %v, outside [-100, 100]", b.Token, b.Bias)
		}
	}
	return nil
}

// Sampler draws tokens for one sequence.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	idx  []int
	prob []float32
	heap []int    // topKSet's scratch
	keys []uint64 // sortByProb's scratch
	// With penalties: how often each token was generated, in order of
	// first appearance, so that applying them walks a short list rather
	// than the vocabulary.
	counts map[int]int
	seen   []int
	adj    []float32 // the logits after biases and penalties
}

// New returns a Sampler for p.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}
}

// Greedy returns the index of the largest logit; ties go to the lowest
// index, as in the reference implementation.
func Greedy(logits []float32) int {
	if len(logits) == 0 {
		return 0
	}
	return kernels.Argmax(logits)
}

// Resume puts the sampler where it would be had it drawn generated
// itself: the generator advanced past one draw per token and the tokens
// counted for the penalties. A decode server continues so a request whose
// first tokens its prefill server drew.
func (s *Sampler) Resume(generated []int) {
	for _, tok := range generated {
		if s.p.Temperature != 0 { // greedy draws nothing
			s.rng.Float32()
		}
		s.count(tok)
	}
}

// count notes that tok was generated, for the penalties.
func (s *Sampler) count(tok int) {
	if s.p.PresencePenalty == 0 && s.p.FrequencyPenalty == 0 {
		return
	}
	if s.counts == nil {
		s.counts = map[int]int{}
	}
	if s.counts[tok] == 0 {
		s.seen = append(s.seen, tok)
	}
	s.counts[tok]++
}

// adjusted returns logits after the biases and penalties: logits itself
// when there are none, else the sampler's copy. Each token's adjustment
// is one float32 sum in a fixed order (bias, then frequency, then
// presence), so the bits depend on nothing but the request.
func (s *Sampler) adjusted(logits []float32) []float32 {
	if !s.p.adjusts() {
		return logits
	}
	s.adj = append(s.adj[:0], logits...)
	for _, b := range s.p.LogitBias {
		if b.Token < len(s.adj) {
			s.adj[b.Token] += b.Bias
		}
	}
	for _, tok := range s.seen {
		if tok >= 0 && tok < len(s.adj) {
			s.adj[tok] -= float32(s.counts[tok])*s.p.FrequencyPenalty + s.p.PresencePenalty
		}
	}
	return s.adj
}

// Next picks a token from logits, after the request's biases and
// penalties, and counts it towards the penalties of the tokens after it.
// It may reorder a scratch copy but leaves logits untouched.
func (s *Sampler) Next(logits []float32) int {
	tok := s.next(s.adjusted(logits))
	s.count(tok)
	return tok
}

func (s *Sampler) next(logits []float32) int {
	if s.p.Temperature == 0 {
		return Greedy(logits)
	}
	idx, prob := s.softmax(logits)
	topK, topP := s.cuts(len(prob))
	if !topK && !topP {
		return s.drawAll(prob)
	}
	idx, keep := s.candidates(idx, prob, topK, topP)
	return s.draw(idx, prob, keep)
}

// softmax returns the sampler's index scratch (its contents are left for
// candidates to fill) and the probabilities at the sampler's temperature. The exponentials are
// kernels.Softmax's float32 ones, which give the same bits on every CPU
// and architecture (with or without SIMD), so a seed draws the same tokens
// wherever it runs; the float64 math.Exp they replaced cost 0.8 ms a token
// over a 32,000-token vocabulary, 32 such draws a step at 32 streams.
func (s *Sampler) softmax(logits []float32) (idx []int, prob []float32) {
	n := len(logits)
	if cap(s.idx) < n {
		s.idx = make([]int, n)
		s.prob = make([]float32, n)
	}
	idx, prob = s.idx[:n], s.prob[:n]
	maxv := logits[Greedy(logits)]
	// Subtracting the largest logit before dividing keeps every value at
	// or below zero, so a temperature near the smallest float32 gives
	// -Inf (probability 0) rather than Inf-Inf = NaN.
	for i, v := range logits {
		prob[i] = (v - maxv) / s.p.Temperature
	}
	kernels.Softmax(prob)
	return idx, prob
}

// draw picks one of the first keep tokens of idx, in proportion to their
// probabilities, with the sampler's generator.
func (s *Sampler) draw(idx []int, prob []float32, keep int) int {
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

// drawAll is draw over every token in index order, without the index
// list: the same sums in the same order, so the same token.
func (s *Sampler) drawAll(prob []float32) int {
	var total float32
	for _, p := range prob {
		total += p
	}
	r := s.rng.Float32() * total
	var c float32
	for i, p := range prob {
		c += p
		if r < c {
			return i
		}
	}
	return len(prob) - 1
}

// cuts reports whether top-k and top-p can leave out any of n tokens.
func (s *Sampler) cuts(n int) (topK, topP bool) {
	return s.p.TopK > 0 && s.p.TopK < n, s.p.TopP > 0 && s.p.TopP < 1
}

// candidates orders the tokens top-k and top-p may draw from first in idx,
// by probability, highest first, ties to the lower index, and returns idx
// and how many of them may be drawn. Sorting the whole vocabulary for
// every token cost more than the forward pass (6 ms for 32,000 tokens),
// so it sorts only a set known to hold the answer: the k most likely
// tokens under top-k, and under top-p alone the tokens no less likely than
// a threshold below which all the others together cannot reach the mass
// top-p leaves out. The walk over the sorted set is the one a full sort
// would make, so the draw is the same; where the set turns out too small
// (rounding), the full sort runs.
// topK and topP are cuts' answer, at least one of them true.
func (s *Sampler) candidates(idx []int, prob []float32, topK, topP bool) ([]int, int) {
	n := len(prob)
	var set []int
	if topK {
		set = topKSet(idx[:0], prob, s.p.TopK, &s.heap)
	} else {
		set = topPSet(idx[:0], prob, s.p.TopP)
	}
	sortByProb(set, prob, &s.keys)
	keep := len(set)
	if topK {
		keep = min(keep, s.p.TopK)
	}
	if !topP {
		return set, keep
	}
	keep, reached := s.cutTopP(set, prob, keep)
	if !reached && !topK {
		// The set fell short of TopP in float32: walk the whole
		// vocabulary, as before.
		for i := range idx[:n] {
			idx[i] = i
		}
		sortByProb(idx[:n], prob, &s.keys)
		keep, _ = s.cutTopP(idx[:n], prob, n)
		return idx[:n], keep
	}
	return set, keep
}

// cutTopP is the top-p cut over the first keep tokens of sorted: how many
// of them it keeps, and whether their mass reached TopP (when not, all
// keep).
func (s *Sampler) cutTopP(sorted []int, prob []float32, keep int) (int, bool) {
	var c float32
	for i := 0; i < keep; i++ {
		c += prob[sorted[i]]
		if c >= s.p.TopP {
			return i + 1, true
		}
	}
	return keep, false
}

// topPSet appends to dst the tokens whose probability's binary exponent is
// at least one below the exponent at which the mass, taken from the
// highest exponent down, reaches topP. Such a set is every token above a
// power of two, so it is a prefix of the sorted order, and it holds the
// top-p cut unless float32 rounding in the walk disagrees with the float64
// sums here by more than a whole exponent's mass; the one spare exponent
// covers that, and candidates falls back to the full sort if it does not.
// Sorting only this set, not every token above a fixed floor, matters
// for flat distributions: 4,198 tokens passed the old floor where the cut
// kept 180.
func topPSet(dst []int, prob []float32, topP float32) []int {
	// Four tables, so that runs of tokens in one binade do not wait on
	// each other's adds; any order of the float64 sums will do, since the
	// spare exponent and the fallback cover rounding.
	var mass [4][256]float64
	i := 0
	for ; i+4 <= len(prob); i += 4 {
		mass[0][math.Float32bits(prob[i])>>23&0xff] += float64(prob[i])
		mass[1][math.Float32bits(prob[i+1])>>23&0xff] += float64(prob[i+1])
		mass[2][math.Float32bits(prob[i+2])>>23&0xff] += float64(prob[i+2])
		mass[3][math.Float32bits(prob[i+3])>>23&0xff] += float64(prob[i+3])
	}
	for ; i < len(prob); i++ {
		mass[0][math.Float32bits(prob[i])>>23&0xff] += float64(prob[i])
	}
	e, m := 255, 0.0
	for ; e > 0; e-- {
		if m += mass[0][e] + mass[1][e] + mass[2][e] + mass[3][e]; m >= float64(topP) {
			break
		}
	}
	floor := max(e-1, 0)
	// Every index is written and kept only where its exponent reaches
	// floor: which tokens do is as good as random, and a branch on it
	// mispredicted for half of them.
	dst = slices.Grow(dst[:0], len(prob))[:len(prob)]
	n := 0
	for i, p := range prob {
		dst[n] = i
		d := int(math.Float32bits(p)>>23&0xff) - floor
		n += 1 + d>>63 // 1 where d >= 0, else 0
	}
	return dst[:n]
}

// before orders tokens by probability, highest first, ties to the lower
// index: the order every cut and draw walks.
func before(prob []float32, a, b int) bool {
	if prob[a] != prob[b] {
		return prob[a] > prob[b]
	}
	return a < b
}

// sortByProb sorts set into before's order. Each token becomes one
// uint64 key, its probability's bits complemented above its index, so
// that the keys' ascending order is before's: probabilities are never
// negative, and the bits of non-negative floats order as the floats do.
// Sorting the keys is several times faster than sorting indices with a
// comparison that loads both probabilities each time (a top-p set of a
// few thousand tokens took most of a draw's time).
func sortByProb(set []int, prob []float32, keys *[]uint64) {
	k := (*keys)[:0]
	for _, i := range set {
		k = append(k, uint64(^math.Float32bits(prob[i]))<<32|uint64(uint32(i)))
	}
	slices.Sort(k)
	for j, key := range k {
		set[j] = int(uint32(key))
	}
	*keys = k
}

// topKSet appends to dst the k tokens that come first in before's order,
// unsorted, keeping a min-heap (by that order) of the best k seen.
func topKSet(dst []int, prob []float32, k int, heap *[]int) []int {
	h := (*heap)[:0]
	// worse reports whether token a comes after token b.
	worse := func(a, b int) bool { return before(prob, b, a) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			if r := l + 1; r < len(h) && worse(h[r], h[l]) {
				l = r
			}
			if !worse(h[l], h[i]) {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	for i := range prob {
		switch {
		case len(h) < k:
			h = append(h, i)
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !worse(h[j], h[p]) {
					break
				}
				h[j], h[p] = h[p], h[j]
				j = p
			}
		case before(prob, i, h[0]):
			h[0] = i
			down(0)
		}
	}
	*heap = h
	return append(dst, h...)
}
