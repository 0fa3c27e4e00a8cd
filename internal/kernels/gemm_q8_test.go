package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// The batched Q8_0 kernel takes rows in fours and tokens in eights (a
// partial eight when at least five are left), falling back to the
// four-row kernels for the rest, for matrices wider than it takes, and for
// tiles holding a weight of -128. Every token must come out with the same
// bits as the pure-Go kernel gives it, and as it gets alone (n = 1, the
// one-token kernel).
func TestGemmQ8Edges(t *testing.T) { eachQ8Path(t, gemmQ8Edges) }

func gemmQ8Edges(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	type shape struct{ rows, cols int }
	shapes := []shape{{1, 32}, {3, 64}, {4, 96}, {5, 32}, {7, 768}, {9, 160}, {13, 2048}, {6, 4096}, {5, 4128}}
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 31, 33, 64}
	for k, sh := range shapes {
		for _, typ := range []tensor.DType{tensor.Q8_0, tensor.Q4_0} {
			n := ns[(k*3)%len(ns)]
			if sh.cols <= 160 {
				n = 0 // every n below
			}
			for _, nn := range ns {
				if n != 0 && nn != n && nn != 64 && nn != 9 {
					continue
				}
				checkQuantBatch(t, rng, typ, sh.rows, sh.cols, nn, false)
			}
		}
	}
	// Weights of -128 in some rows: those tiles take the four-row kernels.
	for _, n := range []int{5, 8, 9, 17} {
		checkQuantBatch(t, rng, tensor.Q8_0, 11, 64, n, true)
	}
}

func checkQuantBatch(t *testing.T, rng *rand.Rand, typ tensor.DType, rows, cols, n int, minus128 bool) {
	t.Helper()
	w, _ := randMatrix(t, rng, typ, rows, cols)
	if minus128 {
		w.Data[(rows-1)*(cols/32)*34+2+rng.IntN(32)] = 0x80
	}
	x := randFloats(rng, n*cols)
	var simd, gen []float32
	withPath(false, func() { gen = matMulNew(1, w, x, n) })
	if useSIMD {
		simd = matMulNew(2, w, x, n)
		if i := firstBitDiff(simd, gen); i >= 0 {
			t.Fatalf("%s %dx%d n=%d: token %d row %d: SIMD %g, Go %g", typ, rows, cols, n, i/rows, i%rows, simd[i], gen[i])
		}
	} else {
		simd = gen
	}
	for _, i := range []int{0, n / 2, n - 1} {
		alone := matMulNew(1, w, x[i*cols:(i+1)*cols], 1)
		if j := firstBitDiff(alone, simd[i*rows:(i+1)*rows]); j >= 0 {
			t.Fatalf("%s %dx%d: token %d of %d, row %d: alone %g, batched %g", typ, rows, cols, i, n, j, alone[j], simd[i*rows+j])
		}
	}
}
