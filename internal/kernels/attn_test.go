package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The attention kernels must give exactly the bits of one Dot or Axpy call
// per row, on both paths, for every width the blocking splits differently
// (32-, 8- and 1-column pieces) and for padded strides.
func TestAttentionRowsMatchPerRowCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, width := range []int{1, 3, 8, 16, 31, 32, 33, 40, 64, 72, 96, 128, 131} {
		for _, pad := range []int{0, 5, 64} {
			for _, rows := range []int{1, 2, 7, 17, 64} {
				stride := width + pad
				q := randFloats(rng, width)
				kv := randFloats(rng, (rows-1)*stride+width)
				w := randFloats(rng, rows)
				y0 := randFloats(rng, width)

				wantDot := make([]float32, rows)
				wantY := append([]float32(nil), y0...)
				withPath(false, func() {
					for i := range wantDot {
						wantDot[i] = Dot(q, kv[i*stride:])
					}
					for i, a := range w {
						Axpy(wantY, a, kv[i*stride:])
					}
				})
				for _, simd := range []bool{false, true} {
					if simd && !hasAVX2 {
						continue
					}
					gotDot := make([]float32, rows)
					gotY := append([]float32(nil), y0...)
					withPath(simd, func() {
						DotRows(gotDot, q, kv, stride)
						AxpyRows(gotY, w, kv, stride)
					})
					if i := firstBitDiff(gotDot, wantDot); i >= 0 {
						t.Fatalf("DotRows width %d stride %d rows %d simd=%v: row %d = %v, per-row Dot %v", width, stride, rows, simd, i, gotDot[i], wantDot[i])
					}
					if i := firstBitDiff(gotY, wantY); i >= 0 {
						t.Fatalf("AxpyRows width %d stride %d rows %d simd=%v: y[%d] = %v, per-row Axpy %v", width, stride, rows, simd, i, gotY[i], wantY[i])
					}
					// The SIMD per-row calls must agree with the Go ones too.
					if simd {
						withPath(true, func() {
							for i := range gotDot {
								if d := Dot(q, kv[i*stride:]); d != wantDot[i] {
									t.Fatalf("Dot SIMD %v != Go %v", d, wantDot[i])
								}
							}
						})
					}
				}
			}
		}
	}
}

func TestAttentionRowsRefuseShortSlices(t *testing.T) {
	for name, f := range map[string]func(){
		"DotRows short k":   func() { DotRows(make([]float32, 3), make([]float32, 8), make([]float32, 2*10+7), 10) },
		"DotRows stride":    func() { DotRows(make([]float32, 2), make([]float32, 8), make([]float32, 100), 4) },
		"AxpyRows short v":  func() { AxpyRows(make([]float32, 8), make([]float32, 3), make([]float32, 2*10+7), 10) },
		"AxpyRows stride<w": func() { AxpyRows(make([]float32, 8), make([]float32, 2), make([]float32, 100), 7) },
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

func BenchmarkAttentionRows(b *testing.B) {
	const width, kvDim, rows = 64, 768, 384
	rng := rand.New(rand.NewPCG(1, 2))
	q := randFloats(rng, width)
	kv := randFloats(rng, rows*kvDim)
	sc := make([]float32, rows)
	y := make([]float32, width)
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			DotRows(sc, q, kv, kvDim)
			AxpyRows(y, sc, kv, kvDim)
		}
	})
	b.Run("per-position", func(b *testing.B) {
		for b.Loop() {
			for i := range sc {
				sc[i] = Dot(q, kv[i*kvDim:])
			}
			for i, a := range sc {
				Axpy(y, a, kv[i*kvDim:])
			}
		}
	})
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
		if n := expShiftSIMD(got, m); n != len(got) {
			t.Fatalf("expShiftSIMD did %d of %d", n, len(got))
		}
		for i, x := range xs {
			want := expf(x - m)
			if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
				t.Fatalf("exp(%v - %v): SIMD %v (%#x), expf %v (%#x)", x, m, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
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
