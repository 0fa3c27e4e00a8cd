package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Every type, on the pool's threads and on whichever kernels this build
// selects, gives each token exactly what the canonical Go kernel gives
// that token alone: across row counts around the kernels' blockings (four
// rows, sixteen-row chunks), token counts around their groupings (one to
// four, partial and whole groups of eight), widths around the batched
// kernel's limit and output strides that alias in L1.
func TestEveryTypeMatchesGoAlone(t *testing.T) { eachQ8Path(t, everyTypeMatchesGoAlone) }

func everyTypeMatchesGoAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	types := []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1,
		tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
	p := twoThreads(t)
	for _, typ := range types {
		for _, sh := range []struct{ rows, cols, n int }{
			{1, 256, 1}, {3, 256, 5}, {5, 512, 13}, {17, 256, 8}, {33, 256, 12}, {70, 256, 4},
			{130, 512, 9}, {257, 256, 3}, {600, 256, 16}, {40, 4352, 6}, {300, 256, 2}, {7, 256, 21},
			// Token rows a multiple of 2 KiB apart: on VNNI the
			// sixteen-token kernels store through the thread's scratch
			// (x16Stores; TestX16StoresBlocks takes it over several
			// blocks).
			{512, 256, 16}, {1024, 256, 29},
		} {
			var w *Matrix
			switch typ {
			case tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0:
				w, _ = randMatrix(t, rng, typ, sh.rows, sh.cols)
			default:
				w = kqWeights(rng, typ, sh.rows, sh.cols)
			}
			w.Scan()
			x := randFloats(rng, sh.n*sh.cols)
			got := make([]float32, sh.n*sh.rows)
			p.MatMul(got, w, x, sh.n)
			nb := sh.cols / 32
			xq := make([]byte, nb*xBlockBytes)
			want := make([]float32, sh.rows)
			for i := 0; i < sh.n; i++ {
				xi := x[i*sh.cols : (i+1)*sh.cols]
				quantizeGo(xq, xi)
				matRowsGo(w, 0, sh.rows, xi, xq, 1, want, sh.rows)
				if j := firstBitDiff(got[i*sh.rows:(i+1)*sh.rows], want); j >= 0 {
					t.Fatalf("%s %dx%d n=%d: token %d row %d = %v, alone on the Go kernel %v",
						typ, sh.rows, sh.cols, sh.n, i, j, got[i*sh.rows+j], want[j])
				}
			}
		}
	}
}
