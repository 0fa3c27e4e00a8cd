package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// fma32 must round once, exactly like VFMADD231SS. Random operands rarely
// hit the double-rounding cases, so half the cases are built to: c cancels
// most of a·b, leaving a sum whose float64 rounding lands near a float32
// halfway point.
func TestFMA32MatchesHardware(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(a, b, c float32) {
		if got, want := fma32(a, b, c), fmaAsm(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#x), hardware %g (%#x)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for i := 0; i < 2_000_000; i++ {
		a := math.Float32frombits(rng.Uint32())
		b := math.Float32frombits(rng.Uint32())
		c := math.Float32frombits(rng.Uint32())
		check(a, b, c)
		// Operands with 12-bit significands so that a·b has 24 bits, and
		// c a small offset: the exact sum sits next to a float32 tie.
		a = float32(rng.IntN(1<<12)+1<<12) * float32(math.Ldexp(1, rng.IntN(20)-10))
		b = float32(rng.IntN(1<<12)+1<<12) * float32(math.Ldexp(1, rng.IntN(20)-10))
		p := float64(a) * float64(b)
		c = float32(math.Ldexp(float64(rng.IntN(5)-2), int(math.Ilogb(p))-24-rng.IntN(40)))
		if rng.IntN(2) == 0 {
			c = -c
		}
		check(a, b, c)
		check(a, b, -float32(p))
	}
	inf := float32(math.Inf(1))
	for _, c := range []float32{inf, -inf} {
		check(3, 5, c)
		check(-3e38, 3e38, c)
		check(inf, 1, c)
		check(0, inf, c)
	}
	check(inf, 2, 7)
	check(-inf, 2, 7)
	check(1, 2, float32(math.NaN()))
	check(0, 0, 0)
	check(float32(math.Copysign(0, -1)), 1, 0)
	check(float32(math.Copysign(0, -1)), 1, float32(math.Copysign(0, -1)))
	check(1e-45, 0.5, 0)
	check(math.MaxFloat32, 2, -math.MaxFloat32)
}

// Every kernel gives identical bits on the SIMD and the pure-Go paths, for
// lengths that are and are not multiples of the SIMD width, and for token
// counts that exercise the four-token and one-token kernels.
func TestSIMDMatchesGo(t *testing.T) { eachQ8Path(t, sIMDMatchesGo) }

func sIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(3, 4))
	plainCols := []int{1, 2, 7, 15, 16, 17, 31, 32, 33, 47, 64, 100, 768, 801}
	quantCols := []int{32, 64, 96, 160, 768, 800}
	for _, typ := range allTypes {
		cols := plainCols
		if quantType(typ) {
			cols = quantCols
		}
		for _, c := range cols {
			rows := 1 + rng.IntN(40)
			n := 1 + rng.IntN(9)
			w, _ := randMatrix(t, rng, typ, rows, c)
			x := randFloats(rng, n*c)
			var simd, gen []float32
			withPath(true, func() { simd = matMulNew(1, w, x, n) })
			withPath(false, func() { gen = matMulNew(1, w, x, n) })
			if i := firstBitDiff(simd, gen); i >= 0 {
				t.Fatalf("%s %dx%d n=%d: token %d row %d: SIMD %g, Go %g", typ, rows, c, n, i/rows, i%rows, simd[i], gen[i])
			}
		}
	}
	for _, n := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000} {
		a, b := randFloats(rng, n), randFloats(rng, n)
		var ds, dg float32
		withPath(true, func() { ds = Dot(a, b) })
		withPath(false, func() { dg = Dot(a, b) })
		if math.Float32bits(ds) != math.Float32bits(dg) {
			t.Fatalf("Dot len %d: SIMD %g, Go %g", n, ds, dg)
		}
		ys, yg := append([]float32(nil), a...), append([]float32(nil), a...)
		withPath(true, func() { axpy1(ys, 0.37, b) })
		withPath(false, func() { axpy1(yg, 0.37, b) })
		if i := firstBitDiff(ys, yg); i >= 0 {
			t.Fatalf("Axpy len %d: element %d: SIMD %g, Go %g", n, i, ys[i], yg[i])
		}
		os, og := make([]float32, n), make([]float32, n)
		withPath(true, func() { RMSNorm(os, a, b, 1e-5) })
		withPath(false, func() { RMSNorm(og, a, b, 1e-5) })
		if i := firstBitDiff(os, og); i >= 0 {
			t.Fatalf("RMSNorm len %d: element %d: SIMD %g, Go %g", n, i, os[i], og[i])
		}
	}
}

func matMulNew(threads int, w *Matrix, x []float32, n int) []float32 {
	p := NewPool(threads)
	defer p.Close()
	out := make([]float32, n*w.Rows)
	p.MatMul(out, w, x, n)
	return out
}

// MatMul agrees with a float64 product of the decoded weights. Plain types
// multiply exactly the decoded values, so only float32 rounding separates
// them; quantised types also quantise x, which costs up to half a step of
// 1/127 of each block's largest activation.
func TestMatMulMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		for _, typ := range allTypes {
			rows, cols, n := 19, 320, 6
			w, dec := randMatrix(t, rng, typ, rows, cols)
			x := randFloats(rng, n*cols)
			var out []float32
			withPath(simd, func() { out = matMulNew(2, w, x, n) })
			for i := 0; i < n; i++ {
				for r := 0; r < rows; r++ {
					// bound: float32 rounding, plus for quantised types
					// each x moved by at most half a step, amax/254.
					var ref, mag, bound float64
					for c := 0; c < cols; c++ {
						p := float64(dec[r*cols+c]) * float64(x[i*cols+c])
						ref += p
						mag += math.Abs(p)
						if quantType(typ) {
							var amax float64
							for _, v := range x[i*cols+c&^31 : i*cols+c&^31+32] {
								amax = math.Max(amax, math.Abs(float64(v)))
							}
							bound += math.Abs(float64(dec[r*cols+c])) * amax / 254 * 1.001
						}
					}
					bound += 1e-5 * mag
					if got := float64(out[i*rows+r]); math.Abs(got-ref) > bound {
						t.Fatalf("simd=%v %s token %d row %d: got %g, want %g (bound %g)", simd, typ, i, r, got, ref, bound)
					}
				}
			}
		}
	}
}

// Token i's output does not depend on how many tokens share the call, on
// what the other tokens are, or on the thread count.
func TestMatMulBatchInvariance(t *testing.T) { eachQ8Path(t, matMulBatchInvariance) }

func matMulBatchInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range allTypes {
		// 300 rows: not a multiple of 16, so thread boundaries are uneven.
		rows, cols, n := 300, 256, 7
		w, _ := randMatrix(t, rng, typ, rows, cols)
		x := randFloats(rng, n*cols)
		batch1 := matMulNew(1, w, x, n)
		batch2 := matMulNew(2, w, x, n)
		batch3 := matMulNew(3, w, x, n)
		for i := 0; i < n; i++ {
			// Token i alone, then token i behind different neighbours.
			alone := matMulNew(2, w, x[i*cols:(i+1)*cols], 1)
			other := randFloats(rng, n*cols)
			copy(other[3*cols:], x[i*cols:(i+1)*cols])
			mixed := matMulNew(2, w, other, n)
			want := batch1[i*rows : (i+1)*rows]
			for name, got := range map[string][]float32{
				"n=7 threads=2": batch2[i*rows : (i+1)*rows],
				"n=7 threads=3": batch3[i*rows : (i+1)*rows],
				"n=1":           alone,
				"slot 3 of 7":   mixed[3*rows : 4*rows],
			} {
				if j := firstBitDiff(got, want); j >= 0 {
					t.Fatalf("%s token %d row %d: %s gives %g, n=7 threads=1 gives %g", typ, i, j, name, got[j], want[j])
				}
			}
		}
	}
}

// Pools are reused across calls of different shapes and types; a stale
// job or a lost wake-up would show as a wrong value or a hang here.
func TestPoolReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := NewPool(2)
	defer p.Close()
	for k := 0; k < 200; k++ {
		typ := allTypes[k%len(allTypes)]
		rows, cols, n := 64+rng.IntN(200), 32*(1+rng.IntN(12)), 1+rng.IntN(5)
		w, _ := randMatrix(t, rng, typ, rows, cols)
		x := randFloats(rng, n*cols)
		got := make([]float32, n*rows)
		p.MatMul(got, w, x, n)
		want := make([]float32, n*rows)
		matRows(w, 0, rows, x, quantizeAll(w, x, n), nil, n, want, rows, nil)
		if j := firstBitDiff(got, want); j >= 0 {
			t.Fatalf("call %d %s: element %d: pool %g, direct %g", k, typ, j, got[j], want[j])
		}
		if k%50 == 0 {
			// Let the worker park so the wake-up path runs too.
			spinWait()
		}
	}
}

func quantizeAll(w *Matrix, x []float32, n int) []byte {
	if !quantType(w.Type) {
		return nil
	}
	nb := w.Cols / 32
	xq := make([]byte, n*nb*xBlockBytes)
	for i := 0; i < n; i++ {
		quantizeX(xq[i*nb*xBlockBytes:], x[i*w.Cols:(i+1)*w.Cols])
	}
	return xq
}

func TestRowTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, typ := range allTypes {
		w, dec := randMatrix(t, rng, typ, 5, 64)
		got := make([]float32, 64)
		RowTo(got, w, 3)
		if j := firstBitDiff(got, dec[3*64:4*64]); j >= 0 {
			t.Fatalf("%s: element %d: %g, want %g", typ, j, got[j], dec[3*64+j])
		}
	}
}

func TestMatMulPanicsOnBadShapes(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	for name, f := range map[string]func(){
		"short x": func() {
			p.MatMul(make([]float32, 4), &Matrix{Type: tensor.F32, Rows: 2, Cols: 2, Data: make([]byte, 16)}, make([]float32, 3), 2)
		},
		"short data": func() {
			p.MatMul(make([]float32, 2), &Matrix{Type: tensor.F32, Rows: 2, Cols: 2, Data: make([]byte, 15)}, make([]float32, 2), 1)
		},
		"bad cols": func() {
			p.MatMul(make([]float32, 1), &Matrix{Type: tensor.Q8_0, Rows: 1, Cols: 16, Data: make([]byte, 34)}, make([]float32, 16), 1)
		},
		"bad type": func() {
			p.MatMul(make([]float32, 1), &Matrix{Type: tensor.Q8_K, Rows: 1, Cols: 256, Data: make([]byte, 292)}, make([]float32, 256), 1)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func ExampleFeatures() {
	f := Features()
	fmt.Println(f == "generic" || f == "avx2 fma f16c" || f == "avx2 fma f16c avx512-vnni")
	// Output: true
}

// The quantised kernels take rows in fours and tokens in fours, twos and
// ones: every row count around a multiple of four, with token counts that
// leave every remainder, must match the Go kernels, and so must weights of -128 (which
// ggml never writes but a file may hold) against activations of ±127.
func TestQuantEdges(t *testing.T) { eachQ8Path(t, quantEdges) }

func quantEdges(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, typ := range []tensor.DType{tensor.Q8_0, tensor.Q4_0} {
		for rows := 1; rows <= 9; rows++ {
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 11} {
				cols := 64
				w, _ := randMatrix(t, rng, typ, rows, cols)
				x := randFloats(rng, n*cols)
				if typ == tensor.Q8_0 {
					for r := 0; r < rows; r++ {
						for b := 0; b < 2; b++ {
							blk := w.Data[r*68+b*34:]
							for j := 2; j < 34; j++ {
								if rng.IntN(3) == 0 {
									blk[j] = 0x80
								}
							}
						}
					}
					for i := range x {
						x[i] = float32(rng.IntN(3)-1) * 5 // all ±amax or 0
					}
				}
				var simd, gen []float32
				withPath(true, func() { simd = matMulNew(2, w, x, n) })
				withPath(false, func() { gen = matMulNew(2, w, x, n) })
				if i := firstBitDiff(simd, gen); i >= 0 {
					t.Fatalf("%s %d rows n=%d: token %d row %d: SIMD %g, Go %g", typ, rows, n, i/rows, i%rows, simd[i], gen[i])
				}
			}
		}
	}
}

// With weights of -128 the Go kernel still computes the exact product: a
// row of -128s (scale 1) against x = 127 everywhere is -128·127·64.
func TestQuantMinusOneTwentyEight(t *testing.T) { eachQ8Path(t, quantMinusOneTwentyEight) }

func quantMinusOneTwentyEight(t *testing.T) {
	data := make([]byte, 68)
	for b := 0; b < 2; b++ {
		data[b*34], data[b*34+1] = 0x00, 0x3c // float16 1.0
		for j := 2; j < 34; j++ {
			data[b*34+j] = 0x80
		}
	}
	w := &Matrix{Type: tensor.Q8_0, Rows: 1, Cols: 64, Data: data}
	x := make([]float32, 64)
	for i := range x {
		x[i] = 127
	}
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		var out []float32
		withPath(simd, func() { out = matMulNew(1, w, x, 1) })
		if want := float32(-128 * 127 * 64); out[0] != want {
			t.Errorf("simd=%v: got %g, want %g", simd, out[0], want)
		}
	}
}

// The AVX2 activation quantiser writes the same bytes as quantizeGo, for
// ordinary values, exact rounding ties, all-zero blocks, subnormals and
// the non-finite values that only a broken model produces.
func TestQuantizeSIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(15, 16))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	blocks := [][]float32{
		make([]float32, 32), // all zero
		{127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, float32(math.Copysign(0, -1))},
		{1e-45, -1e-45, 3e-39, -3e-39},
		{nan, 1, 2},
		{inf, 1, -2},
		{-inf, 1, 2},
		{math.MaxFloat32, -math.MaxFloat32, 1},
	}
	for k := 0; k < 200; k++ {
		blocks = append(blocks, randFloats(rng, 32))
	}
	var x []float32
	for _, b := range blocks {
		blk := make([]float32, 32)
		copy(blk, b)
		x = append(x, blk...)
	}
	nb := len(x) / 32
	got, want := make([]byte, nb*xBlockBytes), make([]byte, nb*xBlockBytes)
	quantizeSIMD(got, x)
	quantizeGo(want, x)
	for i := range got {
		if got[i] != want[i] {
			b := i / xBlockBytes
			t.Fatalf("block %d (%v) byte %d: SIMD %#x, Go %#x", b, x[b*32:b*32+32], i%xBlockBytes, got[i], want[i])
		}
	}
}

// MatMul allocates nothing once its scratch has grown, on any path and
// for any token count (the quantised kernels have one-token, four-token
// and partial-four-row paths, the batched ones eight and sixteen tokens,
// and with 512 rows the sixteen-token kernels' stores go through the
// threads' scratch).
func TestMatMulAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range allTypes {
		for _, rows := range []int{130, 512} {
			matMulAllocs(t, rng, p, typ, rows)
		}
	}
}

// matMulAllocs checks MatMul of a rows×256 matrix of typ on p.
func matMulAllocs(t *testing.T, rng *rand.Rand, p *Pool, typ tensor.DType, rows int) {
	w, _ := randMatrix(t, rng, typ, rows, 256)
	x := randFloats(rng, 32*256)
	out := make([]float32, 32*rows)
	p.MatMul(out, w, x, 32)
	for _, n := range []int{1, 4, 9, 32} {
		if a := testing.AllocsPerRun(20, func() { p.MatMul(out, w, x, n) }); a != 0 {
			t.Errorf("%s %d rows n=%d: %v allocations per MatMul", typ, rows, n, a)
		}
	}
}

// The plain kernels take tokens in threes (two rows at a time), fours and
// ones: every mix of row parity, token remainder and column tail must
// match the Go kernels.
func TestPlainEdges(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(19, 20))
	for _, typ := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for rows := 1; rows <= 5; rows++ {
			for n := 1; n <= 10; n++ {
				for _, cols := range []int{5, 16, 37} {
					w, _ := randMatrix(t, rng, typ, rows, cols)
					x := randFloats(rng, n*cols)
					var simd, gen []float32
					withPath(true, func() { simd = matMulNew(1, w, x, n) })
					withPath(false, func() { gen = matMulNew(1, w, x, n) })
					if i := firstBitDiff(simd, gen); i >= 0 {
						t.Fatalf("%s %dx%d n=%d: token %d row %d: SIMD %g, Go %g", typ, rows, cols, n, i/rows, i%rows, simd[i], gen[i])
					}
				}
			}
		}
	}
}

// TestForCoversEveryItemOnce: For hands out disjoint chunks that cover
// [0, n) exactly, with chunk indices below ForChunks(n), on any thread count.
func TestForCoversEveryItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		p := NewPool(threads)
		for _, n := range []int{1, 2, 7, 64, 1000} {
			hits := make([]int32, n)
			seen := make([]int32, p.ForChunks(n))
			p.For(n, func(c, lo, hi int) {
				atomicAdd(&seen[c], 1)
				for i := lo; i < hi; i++ {
					atomicAdd(&hits[i], 1)
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("threads=%d n=%d: item %d run %d times", threads, n, i, h)
				}
			}
			for c, s := range seen {
				if s > 1 {
					t.Fatalf("threads=%d n=%d: chunk %d run %d times", threads, n, c, s)
				}
			}
		}
		p.Close()
	}
}

func atomicAdd(p *int32, d int32) { atomic.AddInt32(p, d) }
