package sample

import (
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// MaxTopLogprobs is the most alternatives a request may ask for with each
// token (OpenAI's top_logprobs allows 20).
const MaxTopLogprobs = 20

// TokenLogprob is a token and its log probability.
type TokenLogprob struct {
	Token   int
	Logprob float32
}

// Logprobs is what a request that asked for log probabilities learns of
// one generated token: its log probability, and the most likely tokens
// with theirs, most likely first (ties to the lower id).
//
// The probabilities are the model's own: the log-softmax of the raw
// logits, before temperature, top-k, top-p, penalties and biases, as
// vLLM reports by default. They say how likely the model found each
// token, whatever the request's sampling settings made of it.
type Logprobs struct {
	Token   int
	Logprob float32
	Top     []TokenLogprob
}

// LogprobsOf returns tok's Logprobs under logits, with the top most
// likely tokens (at most MaxTopLogprobs); logits is not modified. It
// allocates a scratch copy of the logits: a Sampler's Logprobs reuses its
// own.
func LogprobsOf(logits []float32, tok, top int) Logprobs {
	return logprobsOf(logits, tok, top, nil)
}

// Logprobs is LogprobsOf for the token the sampler just drew from logits,
// with the TopLogprobs of its Params.
func (s *Sampler) Logprobs(logits []float32, tok int) Logprobs {
	if cap(s.prob) < len(logits) {
		s.prob = make([]float32, len(logits))
	}
	return logprobsOf(logits, tok, s.p.TopLogprobs, s.prob)
}

// logprobsOf computes the log-sum-exp of the logits from kernels.Softmax
// over scratch (its float32 exponentials, the sampler's own, about 40
// times faster than math.Exp over a 32,000-token vocabulary): the largest
// logit m has probability 1/S, so log S = -log p(m), and a token's log
// probability is its logit less m + log S.
func logprobsOf(logits []float32, tok, top int, scratch []float32) Logprobs {
	lp := Logprobs{Token: tok, Logprob: float32(math.Inf(-1))}
	if len(logits) == 0 {
		return lp
	}
	arg := Greedy(logits)
	maxv := float64(logits[arg])
	p := append(scratch[:0], logits...)
	kernels.Softmax(p)
	lse := maxv - math.Log(float64(p[arg]))
	of := func(i int) float32 { return float32(float64(logits[i]) - lse) }
	if tok >= 0 && tok < len(logits) {
		lp.Logprob = of(tok)
	}
	top = min(max(top, 0), MaxTopLogprobs, len(logits))
	if top == 0 {
		return lp
	}
	// The top ids, kept sorted by logit (ties to the lower id) by
	// insertion: top is small, and most logits fall below the last.
	ids := make([]int, 0, top)
	for i, v := range logits {
		if v != v || len(ids) == top && !(v > logits[ids[top-1]]) {
			continue // a NaN has no place in an order
		}
		k := len(ids)
		if k < top {
			ids = append(ids, i)
		} else {
			k--
		}
		for k > 0 && v > logits[ids[k-1]] {
			ids[k] = ids[k-1]
			k--
		}
		ids[k] = i
	}
	lp.Top = make([]TokenLogprob, len(ids))
	for k, i := range ids {
		lp.Top[k] = TokenLogprob{Token: i, Logprob: of(i)}
	}
	return lp
}
