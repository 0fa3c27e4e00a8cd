package sample

import "testing"

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
	for _, p := range []Params{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) accepted bad settings", p)
		}
	}
	if err := (Params{Temperature: 0.7, TopK: 40, TopP: 0.95}).Validate(); err != nil {
		t.Errorf("Validate rejected good settings: %v", err)
	}
}

func TestSkipContinuesTheStream(t *testing.T) {
	logits := []float32{1, 1.2, 0.8, 1.1, 0.9}
	p := Params{Temperature: 1, Seed: 42}
	a := New(p)
	a.Next(logits)
	want := []int{a.Next(logits), a.Next(logits), a.Next(logits)}
	b := New(p)
	b.Skip(1)
	for i, w := range want {
		if got := b.Next(logits); got != w {
			t.Fatalf("draw %d after Skip(1) = %d, want %d", i, got, w)
		}
	}
}
