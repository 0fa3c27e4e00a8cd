package sample

import (
	"math"
	"slices"
	"testing"
)

// The log probabilities are the log-softmax of the raw logits, exactly
// enough that they sum to one, and the top list is the most likely tokens
// in order, ties to the lower id.
func TestLogprobsOf(t *testing.T) {
	logits := []float32{1, 3, 3, -2, 0.5, 2}
	lp := LogprobsOf(logits, 5, 4)
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	want := func(i int) float32 { return float32(float64(logits[i]) - math.Log(sum)) }
	if math.Abs(float64(lp.Logprob-want(5))) > 1e-6 || lp.Token != 5 {
		t.Fatalf("token 5: %+v, want logprob %v", lp, want(5))
	}
	var ids []int
	for _, x := range lp.Top {
		ids = append(ids, x.Token)
		if math.Abs(float64(x.Logprob-want(x.Token))) > 1e-6 {
			t.Fatalf("top entry %+v, want %v", x, want(x.Token))
		}
	}
	if !slices.Equal(ids, []int{1, 2, 5, 0}) {
		t.Fatalf("top ids %v, want [1 2 5 0] (ties to the lower id)", ids)
	}
	if lp := LogprobsOf(logits, 3, 0); lp.Top != nil || lp.Logprob != want(3) {
		t.Fatalf("no top asked: %+v", lp)
	}
	if lp := LogprobsOf(logits, 0, 99); len(lp.Top) != len(logits) {
		t.Fatalf("top 99 of 6 logits gave %d entries", len(lp.Top))
	}
	// A NaN logit has no place among the top.
	if lp := LogprobsOf([]float32{1, float32(math.NaN()), 3}, 2, 3); len(lp.Top) != 2 || lp.Top[0].Token != 2 || lp.Top[1].Token != 0 {
		t.Fatalf("with a NaN logit: %+v", lp)
	}
	// Large logits do not overflow: the sum is taken after the largest.
	if lp := LogprobsOf([]float32{1000, 1000}, 0, 1); math.Abs(float64(lp.Logprob)+math.Ln2) > 1e-6 {
		t.Fatalf("two equal logits of 1000: %+v, want log(1/2)", lp)
	}
}

// Asking for log probabilities changes nothing in the draw, though they
// are computed in the sampler's own scratch between draws.
func TestLogprobsLeaveTheDrawAlone(t *testing.T) {
	logits := []float32{1, 1.2, 0.8, 1.1, 0.9}
	p := Params{Temperature: 1, TopP: 0.9, Seed: 3, FrequencyPenalty: 0.3}
	a := New(p)
	p.Logprobs, p.TopLogprobs = true, 2
	b := New(p)
	for range 50 {
		x, y := a.Next(logits), b.Next(logits)
		if x != y {
			t.Fatalf("draws differ: %d and %d", x, y)
		}
		if lp := b.Logprobs(logits, y); lp.Token != y || len(lp.Top) != 2 {
			t.Fatalf("logprobs %+v of token %d", lp, y)
		}
	}
}

func BenchmarkLogprobsOf(b *testing.B) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 5
	}
	s := New(Params{Logprobs: true, TopLogprobs: 5})
	for b.Loop() {
		s.Logprobs(logits, 7)
	}
}
