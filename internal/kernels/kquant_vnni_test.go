//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// kvTwins are the K-quant kernels with VNNI twins: per type the one-,
// two- and four-token AVX2 kernels and their twins.
var kvTwins = []struct {
	typ    tensor.DType
	x1, v1 quantX1
	x2, v2 quantX4
	x4, v4 quantX4
}{
	{tensor.Q4_K, matQ4Kx1, matQ4Kx1VNNI, matQ4Kx2, matQ4Kx2VNNI, matQ4Kx4, matQ4Kx4VNNI},
	{tensor.Q6_K, matQ6Kx1, matQ6Kx1VNNI, matQ6Kx2, matQ6Kx2VNNI, matQ6Kx4, matQ6Kx4VNNI},
	{tensor.Q5_K, matQ5Kx1, matQ5Kx1VNNI, matQ5Kx2, matQ5Kx2VNNI, matQ5Kx4, matQ5Kx4VNNI},
	{tensor.Q3_K, matQ3Kx1, matQ3Kx1VNNI, matQ3Kx2, matQ3Kx2VNNI, matQ3Kx4, matQ3Kx4VNNI},
	{tensor.Q2_K, matQ2Kx1, matQ2Kx1VNNI, matQ2Kx2, matQ2Kx2VNNI, matQ2Kx4, matQ2Kx4VNNI},
}

// needKVNNI skips where the VNNI twins cannot run.
func needKVNNI(tb testing.TB) {
	tb.Helper()
	if !hasVNNI {
		tb.Skip("no AVX-512 VNNI on this CPU")
	}
}

// kvRun calls the n-token kernel (n = 1, 2 or 4) of x1, x2, x4 on rows
// rows of w for the n tokens of xq (nb blocks each, xstride bytes apart)
// and returns the results, token t's row r at t·ostride+r; the values
// between the rows and ostride keep vq8Out's canary.
func kvRun(n int, x1 quantX1, x2, x4 quantX4, w *Matrix, xq []byte, xstride, ostride int) []float32 {
	out := vq8Out(n * ostride)
	kvCall(n, x1, x2, x4, w, xq, xstride, out, ostride)
	return out
}

// kvCall is kvRun into out.
func kvCall(n int, x1 quantX1, x2, x4 quantX4, w *Matrix, xq []byte, xstride int, out []float32, ostride int) {
	rb, _ := w.Type.RowBytes(w.Cols)
	nb := w.Cols / 32
	_ = out[(n-1)*ostride+w.Rows-1]
	wp, xp := unsafe.Pointer(&w.Data[0]), unsafe.Pointer(&xq[0])
	switch n {
	case 1:
		x1(wp, rb, w.Rows, xp, nb, &out[0])
	case 2:
		x2(wp, rb, w.Rows, xp, xstride, nb, &out[0], ostride*4)
	case 4:
		x4(wp, rb, w.Rows, xp, xstride, nb, &out[0], ostride*4)
	default:
		panic("kvCall: n is 1, 2 or 4")
	}
}

// kvActivations returns n tokens of nb activation blocks xstride bytes
// apart: kqActivations' extremes (±127, -128, zero, scales from zero and
// subnormal to 2^20) or, when real, vq8Activations' quantised values.
func kvActivations(rng *rand.Rand, n, nb, xstride int, real bool) []byte {
	var src []byte
	if real {
		src = vq8Activations(rng, n, nb)
	} else {
		src = kqActivations(rng, n, nb)
	}
	xq := make([]byte, (n-1)*xstride+nb*xBlockBytes)
	for t := range n {
		copy(xq[t*xstride:], src[t*nb*xBlockBytes:(t+1)*nb*xBlockBytes])
	}
	return xq
}

// Every twin against its AVX2 kernel on the same inputs, bit for bit:
// rows 1..9 (whole and partial groups of four), 13 and 33 (several
// groups, so the prefetch runs ahead), one to eight superblocks, weights
// with extreme fields (kqWeights) or quantised from random values, and
// activations with extreme or quantised values.
func TestKQuantVNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	rng := rand.New(rand.NewPCG(71, 72))
	rowsList := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33}
	for _, tw := range kvTwins {
		for _, supers := range []int{1, 2, 3, 8} {
			cols := supers * 256
			nb := cols / 32
			for _, rows := range rowsList {
				for k := range 2 {
					var w *Matrix
					if k == 0 {
						w = kqWeights(rng, tw.typ, rows, cols)
					} else {
						w, _ = randMatrix(t, rng, tw.typ, rows, cols)
					}
					for _, n := range []int{1, 2, 4} {
						xstride := nb*xBlockBytes + 36*rng.IntN(3)
						ostride := rows + rng.IntN(3)
						xq := kvActivations(rng, n, nb, xstride, rng.IntN(2) == 0)
						want := kvRun(n, tw.x1, tw.x2, tw.x4, w, xq, xstride, ostride)
						got := kvRun(n, tw.v1, tw.v2, tw.v4, w, xq, xstride, ostride)
						what := fmt.Sprintf("%s %dx%d n=%d weights %d", tw.typ, rows, cols, n, k)
						if written, _ := vq8Same(t, what, got, want); written != n*rows {
							t.Fatalf("%s: %d results written, want %d", what, written, n*rows)
						}
					}
				}
			}
		}
	}
}

// The twins agree with the Go kernel too (through the AVX2 one above),
// checked directly on quantised weights and activations, so that a fault
// shared by both families would still show.
func TestKQuantVNNIMatchesGo(t *testing.T) {
	needKVNNI(t)
	rng := rand.New(rand.NewPCG(73, 74))
	for _, tw := range kvTwins {
		w, _ := randMatrix(t, rng, tw.typ, 11, 768)
		nb := w.Cols / 32
		for _, n := range []int{1, 2, 4} {
			xq := kvActivations(rng, n, nb, nb*xBlockBytes, true)
			got := kvRun(n, tw.v1, tw.v2, tw.v4, w, xq, nb*xBlockBytes, w.Rows)
			want := make([]float32, n*w.Rows)
			matRowsGo(w, 0, w.Rows, nil, xq, n, want, w.Rows)
			for j := range want {
				// Where Go gives NaN, the twins' comparison decides: fma32
				// turns an infinite accumulator plus a finite product into
				// NaN, where VFMADD keeps the infinity.
				if math.IsNaN(float64(want[j])) {
					continue
				}
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s n=%d: token %d row %d is %g, the Go kernel gives %g", tw.typ, n, j/w.Rows, j%w.Rows, got[j], want[j])
				}
			}
		}
	}
}

// BenchmarkKQuantVNNI times each twin against its AVX2 kernel, one
// thread, on a matrix that stays in cache (768x768) and one that does not
// (16384x4096: 36 MiB of Q4_K, 52.5 MiB of Q6_K, past a 32 MiB L3).
// Bytes per second are weight bytes.
func BenchmarkKQuantVNNI(b *testing.B) {
	needKVNNI(b)
	for _, tw := range kvTwins {
		for _, sh := range [][2]int{{768, 768}, {16384, 4096}} {
			w := benchMatrix(b, tw.typ, sh[0], sh[1])
			nb := w.Cols / 32
			xq := kvActivations(rand.New(rand.NewPCG(5, 6)), 4, nb, nb*xBlockBytes, true)
			for _, n := range []int{1, 2, 4} {
				for _, v := range []bool{false, true} {
					x1, x2, x4, name := tw.x1, tw.x2, tw.x4, "avx2"
					if v {
						x1, x2, x4, name = tw.v1, tw.v2, tw.v4, "vnni"
					}
					b.Run(fmt.Sprintf("%s/%dx%d/n=%d/%s", tw.typ, sh[0], sh[1], n, name), func(b *testing.B) {
						out := make([]float32, n*w.Rows)
						b.SetBytes(int64(len(w.Data)))
						for b.Loop() {
							kvCall(n, x1, x2, x4, w, xq, nb*xBlockBytes, out, w.Rows)
						}
					})
				}
			}
		}
	}
}
