package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The head kernels must give each head exactly the bits of one Dot or one
// canonical axpy (axpyGo) per row, on both paths, for every head width the blocking splits
// differently (16- and 8-float pieces and tails), grouped-query offsets
// (heads sharing a key slice) and padded strides.
func TestHeadKernelsMatchPerRowCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, hd := range []int{1, 3, 8, 16, 24, 31, 32, 64, 72, 128} {
		for _, layout := range []struct{ heads, group, pad int }{{1, 1, 0}, {4, 1, 0}, {6, 3, 5}, {8, 8, 0}, {3, 1, 17}} {
			for _, rows := range []int{1, 2, 7, 17, 40} {
				kvHeads := layout.heads / layout.group
				stride := kvHeads*hd + layout.pad
				off := make([]int32, layout.heads)
				for h := range off {
					off[h] = int32((h / layout.group) * hd)
				}
				q := randFloats(rng, layout.heads*hd)
				kv := randFloats(rng, (rows-1)*stride+kvHeads*hd)
				outStride := rows + 3
				w := randFloats(rng, (layout.heads-1)*outStride+rows)
				o0 := randFloats(rng, layout.heads*hd)

				wantS := make([]float32, (layout.heads-1)*outStride+rows)
				wantO := append([]float32(nil), o0...)
				withPath(false, func() {
					for h := range off {
						for i := 0; i < rows; i++ {
							wantS[h*outStride+i] = Dot(q[h*hd:(h+1)*hd], kv[i*stride+int(off[h]):])
						}
						for i := 0; i < rows; i++ {
							axpyGo(wantO[h*hd:(h+1)*hd], w[h*outStride+i], kv[i*stride+int(off[h]):])
						}
					}
				})
				for _, simd := range []bool{false, true} {
					if simd && !hasAVX2 {
						continue
					}
					gotS := make([]float32, len(wantS))
					gotO := append([]float32(nil), o0...)
					withPath(simd, func() {
						HeadScores(gotS, outStride, q, hd, kv, stride, off, rows)
						HeadAccum(gotO, hd, w, outStride, kv, stride, off, rows)
					})
					what := fmt.Sprintf("hd %d heads %d group %d stride %d rows %d simd=%v", hd, layout.heads, layout.group, stride, rows, simd)
					for h := range off {
						for i := 0; i < rows; i++ {
							if g, w := gotS[h*outStride+i], wantS[h*outStride+i]; math.Float32bits(g) != math.Float32bits(w) {
								t.Fatalf("HeadScores %s: head %d row %d = %v, per-row Dot %v", what, h, i, g, w)
							}
						}
					}
					if i := firstBitDiff(gotO, wantO); i >= 0 {
						t.Fatalf("HeadAccum %s: o[%d] = %v, per-row Axpy %v", what, i, gotO[i], wantO[i])
					}
				}
			}
		}
	}
}

func TestHeadKernelsRefuseShortSlices(t *testing.T) {
	off := []int32{0, 8}
	for name, f := range map[string]func(){
		"scores short k": func() {
			HeadScores(make([]float32, 20), 10, make([]float32, 16), 8, make([]float32, 2*16+15), 16, off, 3)
		},
		"scores short out": func() { HeadScores(make([]float32, 12), 10, make([]float32, 16), 8, make([]float32, 100), 16, off, 3) },
		"scores short q":   func() { HeadScores(make([]float32, 20), 10, make([]float32, 15), 8, make([]float32, 100), 16, off, 3) },
		"scores head past": func() {
			HeadScores(make([]float32, 20), 10, make([]float32, 16), 8, make([]float32, 100), 16, []int32{0, 9}, 3)
		},
		"accum short v": func() {
			HeadAccum(make([]float32, 16), 8, make([]float32, 20), 10, make([]float32, 2*16+15), 16, off, 3)
		},
		"accum short w": func() { HeadAccum(make([]float32, 16), 8, make([]float32, 12), 10, make([]float32, 100), 16, off, 3) },
		"accum negative off": func() {
			HeadAccum(make([]float32, 16), 8, make([]float32, 20), 10, make([]float32, 100), 16, []int32{-1, 0}, 3)
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

// BenchmarkHeadKernels is one decode token's attention over a 128-position
// cache of the 110M shape (12 layers x 12 heads of 64), with the cache far
// from the processor caches: every head at once, position by position,
// against one head at a time.
func BenchmarkHeadKernels(b *testing.B) {
	const layers, heads, hd, ctx, copies = 12, 12, 64, 128, 4
	const kvd = heads * hd
	rng := rand.New(rand.NewPCG(1, 2))
	k := randFloats(rng, copies*layers*ctx*kvd)
	v := randFloats(rng, copies*layers*ctx*kvd)
	q := randFloats(rng, kvd)
	o := make([]float32, kvd)
	sc := make([]float32, heads*ctx)
	off := make([]int32, heads)
	for h := range off {
		off[h] = int32(h * hd)
	}
	b.SetBytes(2 * layers * ctx * kvd * 4)
	for _, gs := range []int{12, 6, 3, 1} {
		b.Run(fmt.Sprintf("heads-per-sweep=%d", gs), func(b *testing.B) {
			it := 0
			for b.Loop() {
				base := (it % copies) * layers * ctx * kvd
				it++
				for l := 0; l < layers; l++ {
					kl, vl := k[base+l*ctx*kvd:], v[base+l*ctx*kvd:]
					for h := 0; h < heads; h += gs {
						HeadScores(sc[h*ctx:], ctx, q[h*hd:], hd, kl, kvd, off[h:h+gs], ctx)
						HeadAccum(o[h*hd:], hd, sc[h*ctx:], ctx, vl, kvd, off[h:h+gs], ctx)
					}
				}
			}
		})
	}
}

// The vector exponential must give expf's bits for every input softmax can
// see: ordinary values, both range ends and just past them, results in the
// subnormal range, infinities, NaN and signed zeros.
func TestExpShiftMatchesExpf(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(9, 10))
	var xs []float32
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), 1, -1, expHi, expLo, 88.72284, -87.33655, -87.3365, 88.7228,
		-100, 100, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.5, -0.5, 1e-30, -1e-30} {
		xs = append(xs, v, math.Nextafter32(v, 1e9), math.Nextafter32(v, -1e9))
	}
	for i := 0; i < 1<<16; i++ {
		xs = append(xs, float32(rng.Float64()*200-100), float32(rng.NormFloat64()*3))
	}
	// Values whose x·log2e lands near a half-integer, where floor(t+0.5)
	// is decided by the last bit.
	for k := -126; k <= 128; k++ {
		x := (float32(k) + 0.5) / float32(expLog2e)
		xs = append(xs, x, math.Nextafter32(x, 1e9), math.Nextafter32(x, -1e9))
	}
	for len(xs)%8 != 0 {
		xs = append(xs, 0)
	}
	for _, m := range []float32{0, 3.5, -2} {
		got := append([]float32(nil), xs...)
		var sum, wantSum [4]float32
		if n := expShiftSumSIMD(got, m, &sum); n != len(got) {
			t.Fatalf("expShiftSumSIMD did %d of %d", n, len(got))
		}
		for i, x := range xs {
			want := expf(x - m)
			if !sameBits(got[i], want) {
				t.Fatalf("exp(%v - %v): SIMD %v (%#x), expf %v (%#x)", x, m, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
			}
			wantSum[i%4] += want
		}
		for j := range sum {
			if !sameBits(sum[j], wantSum[j]) {
				t.Fatalf("m %v: partial sum %d is %v, the loop's is %v", m, j, sum[j], wantSum[j])
			}
		}
	}
}

// SiLUMul's SIMD body must give the scalar loop's bits, NaN and infinities
// included, for lengths that leave every tail size.
func TestSiLUMulSIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 7, 8, 9, 64, 2048, 2051} {
		a := randFloats(rng, n)
		b := randFloats(rng, n)
		for i := 0; i < n; i += 5 {
			a[i] = float32(rng.Float64()*200 - 100)
		}
		if n > 8 {
			a[1], a[2], a[3], a[4] = float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1))
		}
		want := append([]float32(nil), a...)
		got := append([]float32(nil), a...)
		withPath(false, func() { SiLUMul(want, b) })
		withPath(true, func() { SiLUMul(got, b) })
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("n %d: silu(%v)·%v: SIMD %v, Go %v", n, a[i], b[i], got[i], want[i])
			}
		}
	}
}

// sameBits reports whether a and b have the same bits, or are both NaN.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// Softmax's SIMD steps (maximum, exponentials with the partial sums,
// scaling) must give the Go loops' bits for every length and for the
// values where VMAXPS and max part: NaN, and maxima of either zero.
func TestSoftmaxSIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(15, 16))
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	shapes := map[string]func(x []float32){
		"normal":   func(x []float32) {},
		"equal":    func(x []float32) { clear(x) },
		"negzero":  func(x []float32) { fill(x, -1); x[len(x)/2] = negZero },
		"zeros":    func(x []float32) { fill(x, -1); x[0], x[len(x)-1] = negZero, 0 },
		"zerosrev": func(x []float32) { fill(x, -1); x[0], x[len(x)-1] = 0, negZero },
		"nan":      func(x []float32) { x[len(x)/3] = float32(math.NaN()) },
		"inf":      func(x []float32) { x[len(x)-1] = inf },
		"neginf":   func(x []float32) { fill(x, -inf); x[len(x)/2] = 2 },
		"allneg":   func(x []float32) { fill(x, -inf) },
	}
	for name, shape := range shapes {
		for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 512, 32000, 32003} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 4)
			}
			shape(x)
			var simd, plain []float32
			withPath(true, func() { simd = append([]float32(nil), x...); Softmax(simd) })
			withPath(false, func() { plain = append([]float32(nil), x...); Softmax(plain) })
			for i := range x {
				if !sameBits(simd[i], plain[i]) {
					t.Fatalf("%s, len %d: [%d] is %v (%#x) with SIMD, %v (%#x) without", name, n, i, simd[i], math.Float32bits(simd[i]), plain[i], math.Float32bits(plain[i]))
				}
			}
		}
	}
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}
