package loadgen

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 0, 7},
		{[]float64{7}, 99, 7},
		{[]float64{1, 2}, 50, 1.5},
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{10, 20, 30}, 50, 20},
		{[]float64{10, 20, 30}, 75, 25},
		{hundred, 0, 1},
		{hundred, 50, 50.5},
		{hundred, 90, 90.1},
		{hundred, 99, 99.01},
		{hundred, 100, 100},
		{hundred, 150, 100}, // clamped
		{hundred, -1, 1},
	}
	for _, tc := range tests {
		if got := Percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Percentile(%d values, %g) = %g, want %g", len(tc.xs), tc.p, got, tc.want)
		}
	}
}

// Properties over random samples: a percentile lies between the two
// order statistics around its rank, and never falls as p rises.
func TestPercentileProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(50)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rng.ExpFloat64() * 10
		}
		sort.Float64s(xs)
		prev := math.Inf(-1)
		for p := 0.0; p <= 100; p += 0.5 {
			got := Percentile(xs, p)
			rank := p / 100 * float64(n-1)
			lo, hi := xs[int(math.Floor(rank))], xs[int(math.Ceil(rank))]
			if got < lo || got > hi {
				t.Fatalf("trial %d: p%g = %g outside [%g, %g]", trial, p, got, lo, hi)
			}
			if got < prev {
				t.Fatalf("trial %d: p%g = %g below the previous %g", trial, p, got, prev)
			}
			prev = got
		}
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3})
	want := Summary{N: 5, Mean: 3, Min: 1, P50: 3, P90: 4.6, P99: 4.96, Max: 5}
	if math.Abs(s.P90-want.P90) > 1e-9 || math.Abs(s.P99-want.P99) > 1e-9 {
		t.Errorf("got %+v, want %+v", s, want)
	}
	s.P90, s.P99 = want.P90, want.P99
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty sample should give a zero summary")
	}
}

func TestReservoir(t *testing.T) {
	r := newReservoir(10, 1)
	for i := range 10 {
		r.add(float64(i))
	}
	if len(r.xs) != 10 || r.xs[9] != 9 {
		t.Fatalf("below capacity every value is kept: %v", r.xs)
	}
	r = newReservoir(1000, 1)
	for i := range 100_000 {
		r.add(float64(i))
	}
	if len(r.xs) != 1000 || r.seen != 100_000 {
		t.Fatalf("kept %d of %d", len(r.xs), r.seen)
	}
	// A uniform sample of 0..99999 has its median near 50000; a reservoir
	// that favoured early or late values would miss by far more than 10%.
	med := Percentile(sortedCopy(r.xs), 50)
	if med < 40_000 || med > 60_000 {
		t.Errorf("sample median %g, want about 50000", med)
	}
}

func sortedCopy(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s
}
