package loadgen

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, which
// must be in ascending order, by linear interpolation between the two
// nearest ranks (the method numpy and most spreadsheets use by default).
// It returns 0 for an empty slice. p outside [0, 100] is clamped.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	p = min(max(p, 0), 100)
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, n-1)
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[hi]-sorted[lo])
}

// Summary describes a sample of latencies, in milliseconds.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Summarize returns the summary of xs (milliseconds). It sorts xs in
// place. An empty sample gives a zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	sort.Float64s(xs)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return Summary{
		N:    len(xs),
		Mean: sum / float64(len(xs)),
		Min:  xs[0],
		P50:  Percentile(xs, 50),
		P90:  Percentile(xs, 90),
		P99:  Percentile(xs, 99),
		Max:  xs[len(xs)-1],
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reservoir keeps a uniform random sample of at most cap values out of
// all those added (Vitter's algorithm R), so that inter-token gaps of a
// long run cannot grow memory without bound. Below cap it keeps every
// value, and percentiles are exact. It is not safe for concurrent use.
type reservoir struct {
	cap  int
	seen int
	xs   []float64
	rng  *rand.Rand
}

func newReservoir(capacity int, seed uint64) *reservoir {
	return &reservoir{cap: capacity, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (r *reservoir) add(x float64) {
	r.seen++
	if len(r.xs) < r.cap {
		r.xs = append(r.xs, x)
		return
	}
	if j := r.rng.IntN(r.seen); j < r.cap {
		r.xs[j] = x
	}
}
