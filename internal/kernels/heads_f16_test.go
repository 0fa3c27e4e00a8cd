package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// randHalves returns n binary16 values of randFloats' spread, with some
// subnormals, zeros of both signs and values at the top of the range mixed
// in, and their widening by tensor.F16ToF32: the cache the float32 kernels
// would hold.
func randHalves(rng *rand.Rand, n int) ([]uint16, []float32) {
	h := make([]uint16, n)
	f := make([]float32, n)
	for i, x := range randFloats(rng, n) {
		h[i] = tensor.F32ToF16(x)
		switch rng.IntN(16) {
		case 0:
			h[i] = uint16(rng.IntN(0x400)) | uint16(rng.IntN(2))<<15 // subnormal or zero
		case 1:
			h[i] = 0x7bff - uint16(rng.IntN(64)) | uint16(rng.IntN(2))<<15 // near the largest
		}
		f[i] = tensor.F16ToF32(h[i])
	}
	return h, f
}

// withNaNTail returns a copy of s of capacity len(s)+extra whose elements
// past the end are NaN: a kernel that read them would put NaN in a result.
func withNaNTail(s []uint16, extra int) []uint16 {
	t := make([]uint16, len(s), len(s)+extra)
	copy(t, s)
	for i := len(s); i < cap(t); i++ {
		t[:cap(t)][i] = 0x7e00
	}
	return t
}

// The F16 head kernels must give exactly the bits of the float32 kernels
// on the widened cache, on the path this build selects and on the Go
// loops, for every head width the blocking splits differently (16- and
// 8-float pieces and tails), grouped-query offsets, padded strides and odd
// row counts; and the assembly must agree with the Go loops directly.
func TestHeadKernelsF16MatchF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, hd := range []int{1, 3, 7, 8, 16, 24, 31, 32, 48, 64, 72, 128} {
		for _, layout := range []struct{ heads, group, pad int }{{1, 1, 0}, {4, 1, 0}, {6, 3, 5}, {8, 8, 0}, {3, 1, 17}, {12, 4, 64}} {
			for _, rows := range []int{1, 2, 7, 17, 33} {
				kvHeads := layout.heads / layout.group
				stride := kvHeads*hd + layout.pad
				off := make([]int32, layout.heads)
				for h := range off {
					// The last kv head's slice ends the cache exactly.
					off[h] = int32((h/layout.group)*hd + layout.pad)
				}
				n := (rows-1)*stride + kvHeads*hd + layout.pad
				kv16, kv32 := randHalves(rng, n)
				kv16 = withNaNTail(kv16, 9)
				q := randFloats(rng, layout.heads*hd)
				outStride := rows + 3
				w := randFloats(rng, (layout.heads-1)*outStride+rows)
				o0 := randFloats(rng, layout.heads*hd)
				what := fmt.Sprintf("hd %d heads %d group %d stride %d rows %d", hd, layout.heads, layout.group, stride, rows)

				for _, simd := range []bool{false, true} {
					if simd && !hasAVX2 {
						continue
					}
					wantS := make([]float32, len(w))
					gotS := make([]float32, len(w))
					wantO := append([]float32(nil), o0...)
					gotO := append([]float32(nil), o0...)
					withPath(simd, func() {
						HeadScores(wantS, outStride, q, hd, kv32, stride, off, rows)
						HeadAccum(wantO, hd, w, outStride, kv32, stride, off, rows)
						HeadScoresF16(gotS, outStride, q, hd, kv16, stride, off, rows)
						HeadAccumF16(gotO, hd, w, outStride, kv16, stride, off, rows)
					})
					if i := firstBitDiff(gotS, wantS); i >= 0 {
						t.Fatalf("HeadScoresF16 %s simd=%v: out[%d] = %v, HeadScores on the widened keys %v", what, simd, i, gotS[i], wantS[i])
					}
					if i := firstBitDiff(gotO, wantO); i >= 0 {
						t.Fatalf("HeadAccumF16 %s simd=%v: o[%d] = %v, HeadAccum on the widened values %v", what, simd, i, gotO[i], wantO[i])
					}
				}

				// The Go loops called directly, against the selected path:
				// on amd64 this is assembly against Go.
				goS := make([]float32, len(w))
				gotS := make([]float32, len(w))
				goO := append([]float32(nil), o0...)
				gotO := append([]float32(nil), o0...)
				headScoresF16Go(goS, outStride, q, hd, kv16, stride, off, rows)
				headAccumF16Go(goO, hd, w, outStride, kv16, stride, off, rows)
				HeadScoresF16(gotS, outStride, q, hd, kv16, stride, off, rows)
				HeadAccumF16(gotO, hd, w, outStride, kv16, stride, off, rows)
				if i := firstBitDiff(gotS, goS); i >= 0 {
					t.Fatalf("HeadScoresF16 %s: out[%d] = %v, Go loop %v", what, i, gotS[i], goS[i])
				}
				if i := firstBitDiff(gotO, goO); i >= 0 {
					t.Fatalf("HeadAccumF16 %s: o[%d] = %v, Go loop %v", what, i, gotO[i], goO[i])
				}
			}
		}
	}
}

// The kernels must write only the out or o entries they own: gaps between
// heads' score rows and everything past the end stay as they were.
func TestHeadKernelsF16WriteOnlyTheirOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const hd, nh, rows, outStride = 24, 3, 5, 9
	kv16, _ := randHalves(rng, (rows-1)*nh*hd+nh*hd)
	off := []int32{0, hd, 2 * hd}
	q := randFloats(rng, nh*hd)
	sentinel := float32(-12345.5)
	out := make([]float32, (nh-1)*outStride+rows+8)
	for i := range out {
		out[i] = sentinel
	}
	HeadScoresF16(out[:(nh-1)*outStride+rows], outStride, q, hd, kv16, nh*hd, off, rows)
	for h := 0; h < nh; h++ {
		for i := rows; i < outStride && h*outStride+i < len(out); i++ {
			if out[h*outStride+i] != sentinel {
				t.Fatalf("HeadScoresF16 wrote out[%d], past head %d's %d rows", h*outStride+i, h, rows)
			}
		}
	}
	o := make([]float32, nh*hd+8)
	for i := nh * hd; i < len(o); i++ {
		o[i] = sentinel
	}
	HeadAccumF16(o[:nh*hd], hd, randFloats(rng, (nh-1)*outStride+rows), outStride, kv16, nh*hd, off, rows)
	for i := nh * hd; i < len(o); i++ {
		if o[i] != sentinel {
			t.Fatalf("HeadAccumF16 wrote o[%d] past its %d floats", i, nh*hd)
		}
	}
}

func TestHeadKernelsF16RefuseShortSlices(t *testing.T) {
	off := []int32{0, 8}
	for name, f := range map[string]func(){
		"scores short k": func() {
			HeadScoresF16(make([]float32, 20), 10, make([]float32, 16), 8, make([]uint16, 2*16+15), 16, off, 3)
		},
		"scores short out": func() {
			HeadScoresF16(make([]float32, 12), 10, make([]float32, 16), 8, make([]uint16, 100), 16, off, 3)
		},
		"scores out stride below rows": func() {
			HeadScoresF16(make([]float32, 20), 2, make([]float32, 16), 8, make([]uint16, 100), 16, off, 3)
		},
		"scores short q": func() {
			HeadScoresF16(make([]float32, 20), 10, make([]float32, 15), 8, make([]uint16, 100), 16, off, 3)
		},
		"scores head past stride": func() {
			HeadScoresF16(make([]float32, 20), 10, make([]float32, 16), 8, make([]uint16, 100), 16, []int32{0, 9}, 3)
		},
		"accum short v": func() {
			HeadAccumF16(make([]float32, 16), 8, make([]float32, 20), 10, make([]uint16, 2*16+15), 16, off, 3)
		},
		"accum short o": func() {
			HeadAccumF16(make([]float32, 15), 8, make([]float32, 20), 10, make([]uint16, 100), 16, off, 3)
		},
		"accum short w": func() {
			HeadAccumF16(make([]float32, 16), 8, make([]float32, 12), 10, make([]uint16, 100), 16, off, 3)
		},
		"accum negative off": func() {
			HeadAccumF16(make([]float32, 16), 8, make([]float32, 20), 10, make([]uint16, 100), 16, []int32{-1, 0}, 3)
		},
		"ToF16 short dst":   func() { ToF16(make([]uint16, 7), make([]float32, 8)) },
		"FromF16 short dst": func() { FromF16(make([]float32, 7), make([]uint16, 8)) },
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

// wantFromF16 is what widening h must give: tensor.F16ToF32, except that
// a signalling NaN comes back quiet, as VCVTPH2PS returns it.
func wantFromF16(h uint16) uint32 {
	b := math.Float32bits(tensor.F16ToF32(h))
	if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
		b |= 0x400000
	}
	return b
}

// FromF16 is checked on all 65536 halves, on the selected path, on the Go
// conversion, and at lengths that leave tails of every size.
func TestFromF16AllHalves(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		dst := make([]float32, len(src))
		withPath(simd, func() { FromF16(dst, src) })
		for i, h := range src {
			if g, w := math.Float32bits(dst[i]), wantFromF16(h); g != w {
				t.Fatalf("FromF16(%#04x) simd=%v = %#08x, want %#08x (tensor.F16ToF32 gives %#08x)", h, simd, g, w, math.Float32bits(tensor.F16ToF32(h)))
			}
			if g, w := math.Float32bits(f16ToF32(h)), wantFromF16(h); g != w {
				t.Fatalf("f16ToF32(%#04x) = %#08x, want %#08x", h, g, w)
			}
		}
	}
	// Quiet NaNs and everything not a NaN are exactly tensor.F16ToF32.
	for _, h := range []uint16{0x7e00, 0xfe01, 0x7fff, 0x7c00, 0xfc00, 0x0001, 0x8000, 0x3c00} {
		if g, w := math.Float32bits(f16ToF32(h)), math.Float32bits(tensor.F16ToF32(h)); g != w {
			t.Errorf("f16ToF32(%#04x) = %#08x, tensor.F16ToF32 %#08x", h, g, w)
		}
	}
	for n := 0; n <= 19; n++ {
		dst := make([]float32, n+1)
		dst[n] = 7
		FromF16(dst, src[0x3c00:0x3c00+n])
		for i := 0; i < n; i++ {
			if dst[i] != tensor.F16ToF32(uint16(0x3c00+i)) {
				t.Fatalf("FromF16 of %d halves: dst[%d] = %v", n, i, dst[i])
			}
		}
		if dst[n] != 7 {
			t.Fatalf("FromF16 of %d halves wrote dst[%d]", n, n)
		}
	}
}

// wantToF16 is what narrowing f must give: tensor.F32ToF16 for every
// input but NaN; a NaN keeps its sign and top ten payload bits and gets the
// quiet bit, as VCVTPS2PH does.
func wantToF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff
	}
	return tensor.F32ToF16(f)
}

// toF16Inputs returns the values narrowing is hardest on: every binary16
// value widened, the midpoints between neighbours (ties, both ways of
// rounding to even) and the floats on either side of each, the overflow
// threshold, the subnormal and underflow boundaries, float32 subnormals,
// infinities and NaNs of many payloads and both signs; then random bit
// patterns.
func toF16Inputs(rng *rand.Rand, random int) []float32 {
	var xs []float32
	for h := 0; h < 0x7c00; h++ {
		a := tensor.F16ToF32(uint16(h))
		var mid float32
		if h == 0x7bff {
			mid = 65520 // half-way to 2^16: the first value that overflows
		} else {
			mid = float32((float64(a) + float64(tensor.F16ToF32(uint16(h+1)))) / 2)
		}
		for _, x := range []float32{a, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9)} {
			xs = append(xs, x, -x)
		}
	}
	for _, b := range []uint32{
		0, 1, 2, 0x7fffff, 0x800000, // float32 subnormals and the smallest normal
		0x33000000, 0x33000001, 0x32ffffff, // 2^-25 (ties to zero) and its neighbours
		0x7f7fffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, // large
		0x7f800000,                                     // +Inf
		0x7fc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, // NaNs, quiet and signalling
		0x7f802000, 0x7fa00000, 0x7f801fff, 0x7fd55555,
	} {
		xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|0x80000000))
	}
	for i := 0; i < random; i++ {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	return xs
}

func TestToF16(t *testing.T) {
	xs := toF16Inputs(rand.New(rand.NewPCG(15, 16)), 1<<19)
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		dst := make([]uint16, len(xs))
		withPath(simd, func() { ToF16(dst, xs) })
		for i, x := range xs {
			if g, w := dst[i], wantToF16(x); g != w {
				t.Fatalf("ToF16(%v = %#08x) simd=%v = %#04x, want %#04x", x, math.Float32bits(x), simd, g, w)
			}
			if g, w := f32ToF16(x), wantToF16(x); g != w {
				t.Fatalf("f32ToF16(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), g, w)
			}
		}
	}
	for n := 0; n <= 19; n++ {
		dst := make([]uint16, n+1)
		dst[n] = 7
		ToF16(dst, xs[:n])
		for i := 0; i < n; i++ {
			if dst[i] != wantToF16(xs[i]) {
				t.Fatalf("ToF16 of %d floats: dst[%d] = %#04x", n, i, dst[i])
			}
		}
		if dst[n] != 7 {
			t.Fatalf("ToF16 of %d floats wrote dst[%d]", n, n)
		}
	}
}

// TestToF16AllFloats sweeps all 2^32 float32 bit patterns: the selected
// path against the Go conversion and wantToF16. It takes about a minute,
// so it runs only with BULKHEAD_EXHAUSTIVE=1 in the environment.
func TestToF16AllFloats(t *testing.T) {
	if os.Getenv("BULKHEAD_EXHAUSTIVE") == "" {
		t.Skip("set BULKHEAD_EXHAUSTIVE=1 to sweep all 2^32 floats")
	}
	const chunk = 1 << 16
	src := make([]float32, chunk)
	dst := make([]uint16, chunk)
	for hi := uint64(0); hi < 1<<32; hi += chunk {
		for i := range src {
			src[i] = math.Float32frombits(uint32(hi) + uint32(i))
		}
		ToF16(dst, src)
		for i, x := range src {
			if w := wantToF16(x); dst[i] != w || f32ToF16(x) != w {
				t.Fatalf("%#08x: ToF16 %#04x, f32ToF16 %#04x, want %#04x", math.Float32bits(x), dst[i], f32ToF16(x), w)
			}
		}
	}
}

// benchCache holds one random cache, float32 and binary16, large enough
// that the benchmarks below stream it from memory rather than from cache.
var benchCache struct {
	f32 []float32
	f16 []uint16
}

func benchKV(b *testing.B) ([]float32, []uint16) {
	if benchCache.f32 == nil {
		rng := rand.New(rand.NewPCG(17, 18))
		benchCache.f32 = randFloats(rng, 16<<20) // 64 MiB, twice the L3 of the machines we run
		benchCache.f16 = make([]uint16, len(benchCache.f32))
		ToF16(benchCache.f16, benchCache.f32)
		FromF16(benchCache.f32, benchCache.f16)
	}
	b.ResetTimer()
	return benchCache.f32, benchCache.f16
}

// benchHeads runs one decode token's scores or accumulation over one
// layer of a cache of the 110M shape (12 heads of 64, stride 768), a
// different layer-sized slice of benchCache each time. SetBytes counts
// the key or value bytes read, so F16 and F32 compare in MB/s of cache.
func benchHeads(b *testing.B, accum, half bool) {
	const heads, hd, stride = 12, 64, 768
	for _, rows := range []int{128, 512} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			k32, k16 := benchKV(b)
			rng := rand.New(rand.NewPCG(19, 20))
			q := randFloats(rng, heads*hd)
			o := make([]float32, heads*hd)
			sc := randFloats(rng, heads*rows)
			off := make([]int32, heads)
			for h := range off {
				off[h] = int32(h * hd)
			}
			layer := rows * stride
			slots := len(k32) / layer
			elem := 4
			if half {
				elem = 2
			}
			b.SetBytes(int64(layer * elem))
			it := 0
			for b.Loop() {
				base := (it % slots) * layer
				it++
				switch {
				case accum && half:
					HeadAccumF16(o, hd, sc, rows, k16[base:base+layer], stride, off, rows)
				case accum:
					HeadAccum(o, hd, sc, rows, k32[base:base+layer], stride, off, rows)
				case half:
					HeadScoresF16(sc, rows, q, hd, k16[base:base+layer], stride, off, rows)
				default:
					HeadScores(sc, rows, q, hd, k32[base:base+layer], stride, off, rows)
				}
			}
		})
	}
}

func BenchmarkHeadScoresF32(b *testing.B) { benchHeads(b, false, false) }
func BenchmarkHeadScoresF16(b *testing.B) { benchHeads(b, false, true) }
func BenchmarkHeadAccumF32(b *testing.B)  { benchHeads(b, true, false) }
func BenchmarkHeadAccumF16(b *testing.B)  { benchHeads(b, true, true) }
