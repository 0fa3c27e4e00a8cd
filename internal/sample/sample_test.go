package sample

import (
	"math"
	"slices"
	"testing"
)

func TestGreedyTiesGoLow(t *testing.T) {
	if got := Greedy([]float32{1, 3, 3, 2}); got != 1 {
		t.Fatalf("Greedy = %d, want 1 (first of the tied maxima)", got)
	}
}

func TestSeedReproduces(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(i%7) * 0.3
	}
	draw := func(seed uint64) []int {
		s := New(Params{Temperature: 1, TopP: 0.9, Seed: seed})
		out := make([]int, 40)
		for i := range out {
			out[i] = s.Next(logits)
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed gave different draws at %d: %v vs %v", i, a, b)
		}
	}
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatalf("seeds 7 and 8 gave identical 40-token draws %v", a)
	}
}

func TestTopKRestricts(t *testing.T) {
	logits := []float32{5, 4, 3, 2, 1, 0}
	s := New(Params{Temperature: 5, TopK: 2, Seed: 1})
	for i := 0; i < 500; i++ {
		if tok := s.Next(logits); tok > 1 {
			t.Fatalf("top_k=2 drew token %d", tok)
		}
	}
}

func TestTopPRestricts(t *testing.T) {
	// Token 0 holds nearly all the mass; top_p 0.5 must always pick it.
	logits := []float32{10, 0, 0, 0}
	s := New(Params{Temperature: 1, TopP: 0.5, Seed: 3})
	for i := 0; i < 500; i++ {
		if tok := s.Next(logits); tok != 0 {
			t.Fatalf("top_p=0.5 drew token %d", tok)
		}
	}
}

func TestTemperatureSpreads(t *testing.T) {
	logits := []float32{1, 1, 1, 1}
	s := New(Params{Temperature: 1, Seed: 9})
	seen := map[int]bool{}
	for i := 0; i < 400; i++ {
		seen[s.Next(logits)] = true
	}
	if len(seen) != 4 {
		t.Fatalf("uniform logits at temperature 1 drew only %v in 400 tries", seen)
	}
}

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	for _, p := range []Params{{Temperature: -1}, {TopK: -1}, {TopP: 1.5},
		{PresencePenalty: 2.5}, {FrequencyPenalty: -2.01}, {PresencePenalty: nan},
		{LogitBias: []Bias{{Token: -1, Bias: 1}}}, {LogitBias: []Bias{{Token: 3, Bias: 101}}},
		{LogitBias: []Bias{{Token: 3, Bias: nan}}}, {LogitBias: []Bias{{Token: 3}, {Token: 3}}},
		{LogitBias: []Bias{{Token: 4}, {Token: 3}}}, {Logprobs: true, TopLogprobs: 21}, {TopLogprobs: 2}} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) accepted bad settings", p)
		}
	}
	good := Params{Temperature: 0.7, TopK: 40, TopP: 0.95, PresencePenalty: -2, FrequencyPenalty: 2,
		LogitBias: []Bias{{Token: 0, Bias: -100}, {Token: 9, Bias: 100}}}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate rejected good settings: %v", err)
	}
}

// A bias moves a token's logit before the draw: +100 makes a token the
// greedy choice, -100 takes the favourite out. The caller's logits stay
// as they were.
func TestLogitBias(t *testing.T) {
	logits := []float32{1, 5, 2, 3}
	if got := New(Params{LogitBias: []Bias{{Token: 0, Bias: 100}}}).Next(logits); got != 0 {
		t.Errorf("greedy with token 0 biased +100 = %d", got)
	}
	if got := New(Params{LogitBias: []Bias{{Token: 1, Bias: -100}}}).Next(logits); got != 3 {
		t.Errorf("greedy with token 1 biased -100 = %d, want 3, the next most likely", got)
	}
	s := New(Params{Temperature: 1, Seed: 3, LogitBias: []Bias{{Token: 1, Bias: -100}, {Token: 2, Bias: 100}}})
	for range 50 {
		if got := s.Next(logits); got != 2 {
			t.Fatalf("a draw with token 2 biased +100 and the favourite -100 gave %d", got)
		}
	}
	if got := New(Params{LogitBias: []Bias{{Token: 99, Bias: 100}}}).Next(logits); got != 1 {
		t.Errorf("a bias of a token past the logits changed the draw to %d", got)
	}
	if logits[0] != 1 || logits[1] != 5 || logits[2] != 2 {
		t.Fatalf("Next changed the caller's logits: %v", logits)
	}
}

// The penalties lower the logits of the tokens already generated: the
// frequency penalty once per time, the presence penalty once. Greedy
// decoding over fixed logits then walks down the ranking instead of
// repeating its favourite.
func TestPenalties(t *testing.T) {
	logits := []float32{0, 4, 3.5, 3.2}
	draws := func(p Params, n int) []int {
		s := New(p)
		var out []int
		for range n {
			out = append(out, s.Next(logits))
		}
		return out
	}
	for _, c := range []struct {
		p    Params
		want []int
	}{
		{Params{}, []int{1, 1, 1, 1}},
		// 4-1 = 3 < 3.5: token 2; 3.5-1 = 2.5 < 3.2: token 3; 3.2-1 = 2.2 < 3: token 1.
		{Params{PresencePenalty: 1}, []int{1, 2, 3, 1}},
		// 4-0.4 = 3.6 > 3.5 stays; 4-0.8 = 3.2 < 3.5: token 2; 3.5-0.4 = 3.1
		// < 3.2, a tie of tokens 1 and 3 that goes to the lower.
		{Params{FrequencyPenalty: 0.4}, []int{1, 1, 2, 1}},
		// A negative penalty rewards repetition.
		{Params{PresencePenalty: -2, LogitBias: []Bias{{Token: 3, Bias: 1.5}}}, []int{3, 3, 3, 3}},
	} {
		if got := draws(c.p, len(c.want)); !slices.Equal(got, c.want) {
			t.Errorf("%+v: greedy draws %v, want %v", c.p, got, c.want)
		}
	}
}

// Resume leaves a sampler as drawing the tokens itself would have: the
// same random stream and the same penalties, which is how a decode server
// continues a request whose first token its prefill server drew.
func TestResumeContinuesTheStream(t *testing.T) {
	logits := []float32{1, 1.2, 0.8, 1.1, 0.9}
	for _, p := range []Params{{Temperature: 1, Seed: 42}, {Temperature: 0.9, Seed: 7, FrequencyPenalty: 0.7, PresencePenalty: 0.3},
		{FrequencyPenalty: 0.1}} {
		a := New(p)
		first := []int{a.Next(logits), a.Next(logits)}
		want := []int{a.Next(logits), a.Next(logits), a.Next(logits), a.Next(logits)}
		b := New(p)
		b.Resume(first)
		for i, w := range want {
			if got := b.Next(logits); got != w {
				t.Fatalf("%+v: draw %d after Resume(%v) = %d, want %d", p, i, first, got, w)
			}
		}
	}
}
