package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

var kTypes = []tensor.DType{tensor.Q4_K, tensor.Q6_K}

// The K-quant kernels multiply the decoded weights by the decoded
// quantised activations: against a float64 sum of exactly those products,
// only the float32 roundings of order.go (two per block and the
// accumulator's) remain, so the tolerance is tight. A kernel that paired
// a weight with the wrong activation, or read a scale from the wrong
// sub-block, would be off by about the size of the sum itself.
func TestKQuantMatMulMatchesReference(t *testing.T) {
	kqReference(t, rand.New(rand.NewPCG(21, 22)), kTypes, 768, 2e-6)
}

// kqReference multiplies 21 rows of each type in types, cols long, by five
// tokens through the pool, on the Go path and (where there is one) the
// SIMD path, and compares each result with the float64 sum of the decoded
// weights times the decoded quantised activations: the error may be at
// most tol times the sum of the terms' magnitudes.
func kqReference(t *testing.T, rng *rand.Rand, types []tensor.DType, cols int, tol float64) {
	t.Helper()
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		for _, typ := range types {
			rows, n := 21, 5
			w, dec := randMatrix(t, rng, typ, rows, cols)
			x := randFloats(rng, n*cols)
			var out []float32
			withPath(simd, func() { out = matMulNew(2, w, x, n) })
			nb := cols / 32
			xq := make([]byte, nb*xBlockBytes)
			xd := make([]float64, cols)
			for i := 0; i < n; i++ {
				quantizeGo(xq, x[i*cols:(i+1)*cols])
				for c := range xd {
					blk := xq[c/32*xBlockBytes:]
					dx := math.Float32frombits(binary.LittleEndian.Uint32(blk))
					xd[c] = float64(dx) * float64(int8(blk[4+c%32]))
				}
				for r := 0; r < rows; r++ {
					var ref, mag float64
					for c := 0; c < cols; c++ {
						p := float64(dec[r*cols+c]) * xd[c]
						ref += p
						mag += math.Abs(p)
					}
					got := float64(out[i*rows+r])
					if math.Abs(got-ref) > tol*mag {
						t.Fatalf("simd=%v %s token %d row %d: got %g, float64 reference %g (|terms| %g)", simd, typ, i, r, got, ref, mag)
					}
				}
			}
		}
	}
}

// A one-hot activation picks out single weights: the kernel's product with
// e_c (times a power of two, so the activation's scale is exact) must be
// the decoded weight c itself, up to the roundings of d·dx and dmin·dx.
// This pins the element order directly, column by column.
func TestKQuantMatMulPicksColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, typ := range kTypes {
		rows, cols := 3, 512
		w, dec := randMatrix(t, rng, typ, rows, cols)
		p := NewPool(1)
		x := make([]float32, cols)
		out := make([]float32, rows)
		for c := 0; c < cols; c += 7 {
			clear(x)
			x[c] = 127
			p.MatMul(out, w, x, 1)
			for r := 0; r < rows; r++ {
				want := float64(dec[r*cols+c]) * 127
				// Q4_K's two terms (scale and min) may cancel: bound the
				// error by the sub-block's largest value, which bounds both.
				var amax float64
				for _, v := range dec[r*cols+c&^31 : r*cols+c&^31+32] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				if d := math.Abs(float64(out[r]) - want); d > 1e-6*amax*127 {
					t.Fatalf("%s row %d column %d: got %g, want %g", typ, r, c, out[r], want)
				}
			}
		}
		p.Close()
	}
}

// K-quant products are bit-identical whatever the batch: a token alone
// (n=1) or in a batch of 7, behind other neighbours, on one or two
// threads, and on the SIMD or the Go dispatch.
func TestKQuantBatchInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, typ := range kTypes {
		rows, cols, n := 150, 512, 7
		w, _ := randMatrix(t, rng, typ, rows, cols)
		x := randFloats(rng, n*cols)
		want := matMulNew(1, w, x, n)
		batch2 := matMulNew(2, w, x, n)
		var goPath []float32
		withPath(false, func() { goPath = matMulNew(2, w, x, n) })
		for i := 0; i < n; i++ {
			alone1 := matMulNew(1, w, x[i*cols:(i+1)*cols], 1)
			alone2 := matMulNew(2, w, x[i*cols:(i+1)*cols], 1)
			other := randFloats(rng, n*cols)
			copy(other[5*cols:], x[i*cols:(i+1)*cols])
			mixed := matMulNew(2, w, other, n)
			ref := want[i*rows : (i+1)*rows]
			for name, got := range map[string][]float32{
				"n=7 threads=2":  batch2[i*rows : (i+1)*rows],
				"n=1 threads=1":  alone1,
				"n=1 threads=2":  alone2,
				"slot 5 of 7":    mixed[5*rows : 6*rows],
				"pure-Go matRow": goPath[i*rows : (i+1)*rows],
			} {
				if j := firstBitDiff(got, ref); j >= 0 {
					t.Fatalf("%s token %d row %d: %s gives %g, n=7 threads=1 gives %g", typ, i, j, name, got[j], ref[j])
				}
			}
		}
	}
}

// MatMuls mixes K-quant matrices with Q8_0 and float ones (a Q4_K_M file
// has Q4_K, Q6_K and sometimes F32 side by side): each product gives the
// bits its own MatMul gives, and nothing allocates once warm.
func TestKQuantMatMulsMixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	cols, n := 256, 6
	var ps []Product
	var ws []*Matrix
	for _, typ := range []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q8_0, tensor.F32} {
		w, _ := randMatrix(t, rng, typ, 40, cols)
		ws = append(ws, w)
		ps = append(ps, Product{W: w, Out: make([]float32, n*40)})
	}
	x := randFloats(rng, n*cols)
	p := NewPool(2)
	defer p.Close()
	p.MatMuls(x, n, ps)
	for k, w := range ws {
		alone := matMulNew(2, w, x, n)
		if j := firstBitDiff(ps[k].Out, alone); j >= 0 {
			t.Fatalf("%s in MatMuls: value %d is %g, alone %g", w.Type, j, ps[k].Out[j], alone[j])
		}
	}
	for _, typ := range kTypes {
		w, _ := randMatrix(t, rng, typ, 130, cols)
		out := make([]float32, 9*130)
		p.MatMul(out, w, x[:cols], 1)
		for _, m := range []int{1, 4} {
			if a := testing.AllocsPerRun(10, func() { p.MatMul(out, w, x, m) }); a != 0 {
				t.Errorf("%s n=%d: %v allocations per MatMul", typ, m, a)
			}
		}
	}
}

func TestKQuantRowTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	for _, typ := range kTypes {
		w, dec := randMatrix(t, rng, typ, 4, 512)
		got := make([]float32, 512)
		RowTo(got, w, 2)
		if j := firstBitDiff(got, dec[2*512:3*512]); j >= 0 {
			t.Fatalf("%s RowTo element %d = %g, want %g", typ, j, got[j], dec[2*512+j])
		}
	}
}

// BenchmarkKQuantDecode is one token through a 768×2048 matrix, the 110M
// shape's feed-forward, on one thread.
func BenchmarkKQuantDecode(b *testing.B) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, typ := range []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q8_0, tensor.Q4_0} {
		b.Run(typ.String(), func(b *testing.B) {
			rows, cols := 2048, 768
			src := randFloats(rng, rows*cols)
			rb, _ := typ.RowBytes(cols)
			data := make([]byte, rows*rb)
			for r := 0; r < rows; r++ {
				if err := tensor.Quantize(typ, data[r*rb:(r+1)*rb], src[r*cols:(r+1)*cols]); err != nil {
					b.Fatal(err)
				}
			}
			w := &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
			x := randFloats(rng, cols)
			out := make([]float32, rows)
			p := NewPool(1)
			defer p.Close()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				p.MatMul(out, w, x, 1)
			}
		})
	}
}
