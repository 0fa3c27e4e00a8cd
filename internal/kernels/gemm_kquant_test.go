//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmKTypes are the K-quant types with an eight-token kernel.
var gemmKTypes = []tensor.DType{tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}

// gemmLegacyTypes are the legacy 32-element types with one
// (gemm_legacy_amd64.s), gemmTypes both sets.
var (
	gemmLegacyTypes = []tensor.DType{tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1}
	gemmTypes       = append(append([]tensor.DType{}, gemmKTypes...), gemmLegacyTypes...)
)

// The eight-token K-quant kernels must give every (row, token) the bits
// dotQ2KGo to dotQ6KGo give it: for 5 to 20 tokens (whole and
// partial groups of eight, with the four-row kernels taking the rest), every
// row count 1..9 (whole and partial fours), one, three and eight superblocks,
// on the extreme blocks of kqWeights and kqActivations.
func TestGemmKQuantMatchesGo(t *testing.T) { eachQ8Path(t, gemmKQuantMatchesGo) }

func gemmKQuantMatchesGo(t *testing.T) {
	needSIMD(t)
	kqSweep(t, rand.New(rand.NewPCG(61, 62)), gemmKTypes, kqCols, 5, 20)
}

// The legacy kernels likewise, and on block counts that are not whole
// superblocks (1, 3 and 7 blocks): they step block by block.
func TestGemmLegacyMatchesGo(t *testing.T) { eachQ8Path(t, gemmLegacyMatchesGo) }

func gemmLegacyMatchesGo(t *testing.T) {
	needSIMD(t)
	kqSweep(t, rand.New(rand.NewPCG(67, 68)), gemmLegacyTypes, []int{32, 96, 224, 768}, 5, 20)
}

// Every type that hasGemm says is batched (so MatMul interleaves its
// activations) has an eight-token kernel that matRowsSIMD sends its
// batches to, and no other type has one: the bits would be the same
// either way, so only this catches a batched kernel left unused.
func TestGemmKernelsSelected(t *testing.T) {
	types := append([]tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0}, gemmTypes...)
	for _, typ := range types {
		_, _, _, g8, ok := quantKernels(typ)
		switch {
		case typ == tensor.Q8_0:
			if !ok || g8 != nil || !hasGemm(typ) {
				t.Errorf("Q8_0: kernels %v, eight-token kernel %v, hasGemm %v; want its own batched path (gemmQ8Rows)", ok, g8 != nil, hasGemm(typ))
			}
		case typ == tensor.F32 || typ == tensor.F16 || typ == tensor.BF16:
			if ok || hasGemm(typ) {
				t.Errorf("%s: quantised kernels %v, hasGemm %v; want neither", typ, ok, hasGemm(typ))
			}
		case !ok || g8 == nil || !hasGemm(typ):
			t.Errorf("%s: kernels %v, eight-token kernel %v, hasGemm %v; want all three", typ, ok, g8 != nil, hasGemm(typ))
		}
	}
}

// The sixteen-token kernels' stores through a thread's scratch
// (x16Stores) over several blocks of x16ScratchRows: 2048 rows, so tiles
// of more than one block (Q8_0 and Q4_0 at 256 columns hold 481 and 910
// rows), row ranges as pool threads get them, with partial blocks and a
// partial last four, and 29 tokens (a pair, then a group, then the
// four-row kernels). Only the VNNI path has sixteen-token kernels.
func TestX16StoresBlocks(t *testing.T) { eachQ8Path(t, x16StoresBlocks) }

func x16StoresBlocks(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(69, 70))
	var st x16Stores
	types := []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
	for _, typ := range types {
		const rows, cols, n = 2048, 256, 29
		var w *Matrix
		if typ == tensor.Q8_0 {
			w, _ = randMatrix(t, rng, typ, rows, cols)
		} else {
			w = kqWeights(rng, typ, rows, cols)
		}
		xq := kqActivations(rng, n, cols/32)
		for _, r := range [][2]int{{0, rows}, {3, 1021}, {5, 262}, {1, 2}, {256, 1024}} {
			got := kqGuarded(n * rows)
			want := make([]float32, n*rows)
			matRowsSIMD(w, r[0], r[1], nil, xq, nil, n, got, rows, &st)
			matRowsGo(w, r[0], r[1], nil, xq, n, want, rows)
			kqGuardIntact(t, got)
			if j := firstBitDiff(got, want); j >= 0 {
				t.Fatalf("%s rows [%d, %d): token %d row %d is %v, the Go kernel gives %v", typ, r[0], r[1], j/rows, j%rows, got[j], want[j])
			}
		}
	}
}

// Several tiles of tileBytes, on the whole matrix and on a sub-range of
// rows as a pool thread gets it, so that the kernel's row groups, partial
// last four and prefetch run across tiles.
func TestGemmKQuantTiles(t *testing.T) { eachQ8Path(t, gemmKQuantTiles) }

func gemmKQuantTiles(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(63, 64))
	for _, typ := range gemmTypes {
		for _, sh := range [][2]int{{301, 1024}, {467, 768}} {
			kqTiles(t, rng, kqWeights(rng, typ, sh[0], sh[1]), []int{5, 8, 13, 20})
		}
	}
	// Q4_K, Q5_K and Q6_K take pairs of groups as sixteen tokens where
	// the CPU has VNNI (as the legacy types do, below): a pair then a
	// group, and two pairs then tokens left over.
	for _, typ := range []tensor.DType{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		kqTiles(t, rng, kqWeights(rng, typ, 301, 1024), []int{21, 29, 35})
	}
	// Up to eight groups of eight, and odd counts whose last group is
	// partial or left to the four-row kernels.
	for _, typ := range gemmLegacyTypes {
		kqTiles(t, rng, kqWeights(rng, typ, 301, 1024), []int{29, 37, 43, 64})
	}
}

// Through the pool, as the model runs them: quantised matrices, one and
// two threads, and a MatMuls whose products of several types share one
// interleaving of the activations (gemmInterleave).
func TestGemmKQuantPool(t *testing.T) { eachQ8Path(t, gemmKQuantPool) }

func gemmKQuantPool(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(65, 66))
	types := append([]tensor.DType{tensor.Q8_0}, gemmTypes...)
	ws := make([]*Matrix, len(types))
	for k, typ := range types {
		ws[k], _ = randMatrix(t, rng, typ, 37+k*29, 768)
	}
	for _, n := range []int{5, 9, 16, 19} {
		x := randFloats(rng, n*768)
		for _, th := range []int{1, 2} {
			for k, w := range ws {
				var want []float32
				withPath(false, func() { want = matMulNew(th, w, x, n) })
				if j := firstBitDiff(matMulNew(th, w, x, n), want); j >= 0 {
					t.Fatalf("%s n=%d threads=%d: value %d differs from the Go path", types[k], n, th, j)
				}
			}
			// Q4_K's sixteen-token kernel and three other types on one
			// interleaving.
			ps := make([]Product, 0, maxProducts)
			for k, w := range ws {
				if len(ps) < maxProducts && (types[k] == tensor.Q4_K || len(ws)-k < maxProducts) {
					ps = append(ps, Product{W: w, Out: make([]float32, n*w.Rows)})
				}
			}
			p := NewPool(th)
			p.MatMuls(x, n, ps)
			p.Close()
			for _, pr := range ps {
				var want []float32
				withPath(false, func() { want = matMulNew(1, pr.W, x, n) })
				if j := firstBitDiff(pr.Out, want); j >= 0 {
					t.Fatalf("MatMuls %s n=%d threads=%d: value %d differs from the Go path", pr.W.Type, n, th, j)
				}
			}
		}
	}
}

// BenchmarkGemmKQuant compares the eight-token K-quant and legacy kernels
// with the four-row kernels in one run (the machine's load varies between
// runs).
func BenchmarkGemmKQuant(b *testing.B) {
	for _, typ := range gemmTypes {
		for _, sh := range [][3]int{{2048, 768, 64}, {768, 2048, 64}} {
			w := benchMatrix(b, typ, sh[0], sh[1])
			n := sh[2]
			x := randFloats(rand.New(rand.NewPCG(2, 3)), n*sh[1])
			out := make([]float32, n*sh[0])
			for _, th := range []int{1, 2} {
				for _, gemm := range []bool{false, true} {
					name := map[bool]string{false: "old", true: "new"}[gemm]
					b.Run(fmt.Sprintf("%s/%dx%d/n=%d/threads=%d/%s", typ, sh[0], sh[1], n, th, name), func(b *testing.B) {
						defer func() { useGemm = true }()
						useGemm = gemm
						p := NewPool(th)
						defer p.Close()
						p.MatMul(out, w, x, n)
						for b.Loop() {
							p.MatMul(out, w, x, n)
						}
						flops := 2 * float64(sh[0]) * float64(sh[1]) * float64(n) * float64(b.N)
						b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}
