//go:build amd64 && !purego

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// needQ8VNNI skips where the VNNI kernels (or their AVX2 twins) cannot run.
func needQ8VNNI(tb testing.TB) {
	tb.Helper()
	if !hasAVX2 || !(cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI) {
		tb.Skip("no AVX-512 VNNI on this CPU")
	}
}

// vq8Weights returns rows rows of nb Q8_0 blocks with the contents the
// flip to w+128 must get right: random blocks with some weights set to
// -128, blocks all -128, all 127 or all zero, and scales from zero and
// subnormal to the float16 maximum, and rarely (most results should stay
// finite) infinite or NaN, with a payload, so that a multiply taking its
// operands in the other order shows.
func vq8Weights(t *testing.T, rng *rand.Rand, rows, nb int) []byte {
	t.Helper()
	w, _ := randMatrix(t, rng, tensor.Q8_0, rows, nb*32)
	data := w.Data
	for k := 0; k < rows*nb; k++ {
		blk := data[k*34 : k*34+34]
		q := blk[2:]
		switch rng.IntN(8) {
		case 0:
			fillBytes(q, 0x80)
		case 1:
			fillBytes(q, 127)
		case 2:
			clear(q)
		case 3, 4:
			for range 1 + rng.IntN(8) {
				q[rng.IntN(32)] = 0x80
			}
		}
		var scale uint16
		switch r := rng.IntN(512); {
		case r < 16:
			scale = 0
		case r < 32:
			scale = 1 // subnormal
		case r < 48:
			scale = 0x7bff // 65504
		case r < 64:
			scale = 0xfbff // -65504
		case r == 64:
			scale = 0x7c00 // +Inf
		case r == 65:
			scale = 0x7e01 // NaN
		default:
			continue
		}
		binary.LittleEndian.PutUint16(blk, scale)
	}
	return data
}

// vq8Activations returns n tokens of nb activation blocks: x quantised
// by the package's quantiser (x with some tiny and zero values and, rarely,
// huge ones), then some blocks overwritten with extremes: all 127, all
// -127, alternating ±127, zero, and scales of zero, subnormal, 2^60 and,
// rarely, NaN (payloads of both signs). Never -128, which the quantiser
// does not make and the AVX2 kernels cannot take (TestQ8VNNIMinus128
// covers it).
func vq8Activations(rng *rand.Rand, n, nb int) []byte {
	cols := nb * 32
	x := randFloats(rng, n*cols)
	for i := range x {
		switch r := rng.IntN(8192); {
		case r == 0:
			x[i] = 3e38
		case r == 1:
			x[i] = -3e38
		case r < 128:
			x[i] = 1e-40
		case r < 256:
			x[i] = 0
		}
	}
	xq := make([]byte, n*nb*xBlockBytes)
	for i := range n {
		quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
	}
	for k := 0; k < n*nb; k++ {
		blk := xq[k*xBlockBytes : (k+1)*xBlockBytes]
		q := blk[4:]
		switch rng.IntN(8) {
		case 0:
			fillBytes(q, 127)
		case 1:
			fillBytes(q, 0x81) // -127
		case 2:
			for i := range q {
				q[i] = 127
				if i%2 == 1 {
					q[i] = 0x81
				}
			}
		case 3:
			clear(q)
		}
		var scale uint32
		switch r := rng.IntN(512); {
		case r < 16:
			scale = 0
		case r < 32:
			scale = 1 // subnormal
		case r < 48:
			scale = math.Float32bits(0x1p60)
		case r == 48:
			scale = 0x7fc00002
		case r == 49:
			scale = 0xffc12345
		default:
			continue
		}
		binary.LittleEndian.PutUint32(blk, scale)
	}
	return xq
}

// vq8Out returns n outputs filled with a NaN no kernel makes, so that
// stores outside the rows show up as differences or as the canary left
// where a row's result belongs.
func vq8Out(n int) []float32 {
	o := make([]float32, n)
	for i := range o {
		o[i] = math.Float32frombits(vq8Canary)
	}
	return o
}

// vq8Canary is the bits vq8Out fills outputs with.
const vq8Canary = 0x7fc0dead

// vq8Same fails unless got (the VNNI kernel's) and want (the AVX2
// kernel's) hold the same bits everywhere. It returns how many results
// were written and how many of those are finite, for the callers to check
// that the extremes left most results meaningful.
func vq8Same(t *testing.T, what string, got, want []float32) (written, finite int) {
	t.Helper()
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("%s: out[%d] is %g (%#x), the AVX2 kernel gives %g (%#x)",
			what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
	}
	for _, v := range want {
		if math.Float32bits(v) == vq8Canary {
			continue
		}
		written++
		if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			finite++
		}
	}
	return written, finite
}

// vq8Finite fails unless at least half of the written results are finite.
func vq8Finite(t *testing.T, written, finite int) {
	t.Helper()
	t.Logf("%d of %d results finite", finite, written)
	if written == 0 || 2*finite < written {
		t.Fatalf("%d of %d results finite: the inputs test too little ordinary arithmetic", finite, written)
	}
}

// vq8CheckGo checks one output against the Go kernel, where that is not
// NaN (NaN payloads are fixed by the twins' comparison, not here): the
// AVX2 twin is the reference, and this guards against both being wrong.
func vq8CheckGo(t *testing.T, what string, got float32, row, xb []byte, nb int) {
	t.Helper()
	want := dotQuantGo(tensor.Q8_0, row, xb, nb)
	if math.IsNaN(float64(want)) {
		return
	}
	if math.Float32bits(got) != math.Float32bits(want) {
		t.Fatalf("%s: %g, the Go kernel gives %g", what, got, want)
	}
}

var vq8Rows = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33}
var vq8Blocks = []int{1, 2, 24, 64}

// The adjacent kernels (four rows side by side, the last group partial
// for rows%4 != 0) for one, two and four tokens: the VNNI kernel writes
// exactly the bits its AVX2 twin writes, and nothing outside the rows.
func TestQ8VNNIAdjacent(t *testing.T) {
	needQ8VNNI(t)
	rng := rand.New(rand.NewPCG(81, 82))
	var written, finite int
	count := func(w, f int) { written, finite = written+w, finite+f }
	for _, rows := range vq8Rows {
		for _, nb := range vq8Blocks {
			rb := nb * 34
			w := vq8Weights(t, rng, rows, nb)
			wp := unsafe.Pointer(&w[0])
			// A gap between tokens' blocks and between their outputs.
			xs := nb*xBlockBytes + 2*xBlockBytes
			os := rows + 3
			xq := vq8Activations(rng, 4, nb+2)
			xp := unsafe.Pointer(&xq[0])
			what := fmt.Sprintf("%d rows, %d blocks", rows, nb)

			got, want := vq8Out(os), vq8Out(os)
			matQ8x1VNNI(wp, rb, rows, xp, nb, &got[0])
			matQ8x1(wp, rb, rows, xp, nb, &want[0])
			count(vq8Same(t, "matQ8x1VNNI "+what, got, want))
			for r := range rows {
				vq8CheckGo(t, fmt.Sprintf("matQ8x1VNNI %s row %d", what, r), got[r], w[r*rb:], xq, nb)
			}

			got, want = vq8Out(2*os), vq8Out(2*os)
			matQ8x2VNNI(wp, rb, rows, xp, xs, nb, &got[0], os*4)
			matQ8x2(wp, rb, rows, xp, xs, nb, &want[0], os*4)
			count(vq8Same(t, "matQ8x2VNNI "+what, got, want))

			got, want = vq8Out(4*os), vq8Out(4*os)
			matQ8x4VNNI(wp, rb, rows, xp, xs, nb, &got[0], os*4)
			matQ8x4(wp, rb, rows, xp, xs, nb, &want[0], os*4)
			count(vq8Same(t, "matQ8x4VNNI "+what, got, want))
			for i := range 4 {
				for r := range rows {
					vq8CheckGo(t, fmt.Sprintf("matQ8x4VNNI %s token %d row %d", what, i, r),
						got[i*os+r], w[r*rb:], xq[i*xs:], nb)
				}
			}
		}
	}
	vq8Finite(t, written, finite)
}

// The strided kernels (four streams of q rows, stride bytes apart) for
// one and two tokens, over strides of exactly q rows, with gaps, with
// overlapping streams, at an odd byte offset, and zero (four copies of
// one stream): the VNNI kernel writes exactly its AVX2 twin's bits.
func TestQ8VNNIStrided(t *testing.T) {
	needQ8VNNI(t)
	rng := rand.New(rand.NewPCG(83, 84))
	var written, finite int
	count := func(w, f int) { written, finite = written+w, finite+f }
	for _, q := range vq8Rows {
		for _, nb := range vq8Blocks {
			rb := nb * 34
			strides := []int{q * rb, (q + 1) * rb, (2*q + 5) * rb, max(1, q/2) * rb, q*rb + 7, 0}
			maxStride := (2*q + 5) * rb
			total := (3*maxStride + q*rb + rb - 1) / rb
			w := vq8Weights(t, rng, total, nb)
			wp := unsafe.Pointer(&w[0])
			xs := nb*xBlockBytes + xBlockBytes
			xq := vq8Activations(rng, 2, nb+1)
			xp := unsafe.Pointer(&xq[0])
			os := 4*q + 5
			for _, stride := range strides {
				what := fmt.Sprintf("%d rows a stream, %d blocks, stride %d", q, nb, stride)

				got, want := vq8Out(os), vq8Out(os)
				matQ8x1sVNNI(wp, rb, q, xp, nb, &got[0], stride)
				matQ8x1s(wp, rb, q, xp, nb, &want[0], stride)
				count(vq8Same(t, "matQ8x1sVNNI "+what, got, want))
				for s := range 4 {
					for r := range q {
						vq8CheckGo(t, fmt.Sprintf("matQ8x1sVNNI %s stream %d row %d", what, s, r),
							got[s*q+r], w[s*stride+r*rb:], xq, nb)
					}
				}

				got, want = vq8Out(2*os), vq8Out(2*os)
				matQ8x2sVNNI(wp, rb, q, xp, xs, nb, &got[0], os*4, stride)
				matQ8x2s(wp, rb, q, xp, xs, nb, &want[0], os*4, stride)
				count(vq8Same(t, "matQ8x2sVNNI "+what, got, want))
			}
		}
	}
	vq8Finite(t, written, finite)
}

// Where a block's weight scale and activation scale are both NaN, which
// payload survives depends on the multiply's operand order: the VNNI
// kernels must keep their twins' (FINISH's: the activation's first), for
// every kernel and every lane of the four-token kernel's paired tokens.
func TestQ8VNNINaNPayload(t *testing.T) {
	needQ8VNNI(t)
	rng := rand.New(rand.NewPCG(87, 88))
	const rows, nb = 16, 3
	rb := nb * 34
	wm, _ := randMatrix(t, rng, tensor.Q8_0, rows, nb*32)
	w := wm.Data
	for r := 0; r < rows; r += 2 {
		binary.LittleEndian.PutUint16(w[r*rb+34:], 0x7e01+uint16(r))
	}
	wp := unsafe.Pointer(&w[0])
	xs := nb * xBlockBytes
	x := randFloats(rng, 4*nb*32)
	xq := make([]byte, 4*xs)
	for i := range 4 {
		quantizeX(xq[i*xs:], x[i*nb*32:(i+1)*nb*32])
		binary.LittleEndian.PutUint32(xq[i*xs+xBlockBytes:], 0x7fc00100+uint32(i))
	}
	xp := unsafe.Pointer(&xq[0])
	os := rows + 1
	got, want := vq8Out(4*os), vq8Out(4*os)
	matQ8x1VNNI(wp, rb, rows, xp, nb, &got[0])
	matQ8x1(wp, rb, rows, xp, nb, &want[0])
	vq8Same(t, "matQ8x1VNNI", got, want)
	matQ8x2VNNI(wp, rb, rows, xp, xs, nb, &got[0], os*4)
	matQ8x2(wp, rb, rows, xp, xs, nb, &want[0], os*4)
	vq8Same(t, "matQ8x2VNNI", got, want)
	matQ8x4VNNI(wp, rb, rows, xp, xs, nb, &got[0], os*4)
	matQ8x4(wp, rb, rows, xp, xs, nb, &want[0], os*4)
	vq8Same(t, "matQ8x4VNNI", got, want)
	matQ8x1sVNNI(wp, rb, rows/4, xp, nb, &got[0], rows/4*rb)
	matQ8x1s(wp, rb, rows/4, xp, nb, &want[0], rows/4*rb)
	vq8Same(t, "matQ8x1sVNNI", got, want)
	matQ8x2sVNNI(wp, rb, rows/4, xp, xs, nb, &got[0], os*4, rows/4*rb)
	matQ8x2s(wp, rb, rows/4, xp, xs, nb, &want[0], os*4, rows/4*rb)
	vq8Same(t, "matQ8x2sVNNI", got, want)
	if math.Float32bits(want[0]) != 0x7fc00100 {
		t.Fatalf("row 0 is %#x, not the activation's NaN: the test misses its point", math.Float32bits(want[0]))
	}
}

// Activations of -128, which quantizeX never makes and the AVX2 kernels'
// sign trick cannot take, are exact on the VNNI kernels (the flip and
// the corrections hold for every byte): against the Go kernel, every
// kernel, a block of -128s and single ones among random values.
func TestQ8VNNIMinus128(t *testing.T) {
	needQ8VNNI(t)
	rng := rand.New(rand.NewPCG(85, 86))
	const rows, nb = 13, 24
	rb := nb * 34
	// Finite scales only, so that every output is checked.
	wm, _ := randMatrix(t, rng, tensor.Q8_0, 4*rows, nb*32)
	w := wm.Data
	for k := 0; k < 4*rows*nb; k += 3 {
		w[k*34+2+rng.IntN(32)] = 0x80
	}
	wp := unsafe.Pointer(&w[0])
	xs := nb * xBlockBytes
	x := randFloats(rng, 4*nb*32)
	xq := make([]byte, 4*xs)
	for i := range 4 {
		quantizeX(xq[i*xs:], x[i*nb*32:(i+1)*nb*32])
	}
	for k := 0; k < 4*nb; k++ {
		q := xq[k*xBlockBytes+4 : (k+1)*xBlockBytes]
		if k%5 == 0 {
			fillBytes(q, 0x80)
			continue
		}
		q[rng.IntN(32)] = 0x80
	}
	xp := unsafe.Pointer(&xq[0])
	check := func(name string, out []float32, os, ntok, nrows, stride int) {
		t.Helper()
		for i := range ntok {
			for r := range nrows {
				row := w[r*rb:]
				if stride != 0 {
					row = w[(r/rows)*stride+(r%rows)*rb:]
				}
				if math.IsNaN(float64(out[i*os+r])) {
					t.Fatalf("%s token %d row %d: NaN", name, i, r)
				}
				vq8CheckGo(t, fmt.Sprintf("%s token %d row %d", name, i, r), out[i*os+r], row, xq[i*xs:], nb)
			}
		}
	}
	os := 4*rows + 1
	out := vq8Out(4 * os)
	matQ8x1VNNI(wp, rb, rows, xp, nb, &out[0])
	check("matQ8x1VNNI", out, os, 1, rows, 0)
	matQ8x2VNNI(wp, rb, rows, xp, xs, nb, &out[0], os*4)
	check("matQ8x2VNNI", out, os, 2, rows, 0)
	matQ8x4VNNI(wp, rb, rows, xp, xs, nb, &out[0], os*4)
	check("matQ8x4VNNI", out, os, 4, rows, 0)
	matQ8x1sVNNI(wp, rb, rows, xp, nb, &out[0], rows*rb)
	check("matQ8x1sVNNI", out, os, 1, 4*rows, rows*rb)
	matQ8x2sVNNI(wp, rb, rows, xp, xs, nb, &out[0], os*4, rows*rb)
	check("matQ8x2sVNNI", out, os, 2, 4*rows, rows*rb)
}

// BenchmarkQ8VNNIKernels times each VNNI kernel against its AVX2 twin,
// one thread: the strided x1s and x2s (the one- and two-token products'
// kernels), x4, and the adjacent x1 and x2 for completeness. The shapes
// are a matrix that stays in L2 (768x768, 612 KiB), one of a vocabulary
// projection's size (32000x768, 26 MB: out of L2, but within a 32 MiB
// L3) and one no cache holds (131072x768, 107 MB); bytes are weight
// bytes.
func BenchmarkQ8VNNIKernels(b *testing.B) {
	needQ8VNNI(b)
	const cols = 768
	nb := cols / 32
	rb := nb * 34
	xq := make([]byte, 4*nb*xBlockBytes)
	x := randFloats(rand.New(rand.NewPCG(5, 6)), 4*cols)
	for i := range 4 {
		quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
	}
	xp, xs := unsafe.Pointer(&xq[0]), nb*xBlockBytes
	for _, sh := range []struct {
		name string
		rows int
	}{{"cache", 768}, {"memory", 32000}, {"dram", 131072}} {
		w := benchMatrix(b, tensor.Q8_0, sh.rows, cols)
		wp := unsafe.Pointer(&w.Data[0])
		out := make([]float32, 4*sh.rows)
		q := sh.rows / 4
		kernels := []struct {
			name string
			f    func()
		}{
			{"x1s/avx2", func() { matQ8x1s(wp, rb, q, xp, nb, &out[0], q*rb) }},
			{"x1s/vnni", func() { matQ8x1sVNNI(wp, rb, q, xp, nb, &out[0], q*rb) }},
			{"x2s/avx2", func() { matQ8x2s(wp, rb, q, xp, xs, nb, &out[0], sh.rows*4, q*rb) }},
			{"x2s/vnni", func() { matQ8x2sVNNI(wp, rb, q, xp, xs, nb, &out[0], sh.rows*4, q*rb) }},
			{"x1/avx2", func() { matQ8x1(wp, rb, sh.rows, xp, nb, &out[0]) }},
			{"x1/vnni", func() { matQ8x1VNNI(wp, rb, sh.rows, xp, nb, &out[0]) }},
			{"x2/avx2", func() { matQ8x2(wp, rb, sh.rows, xp, xs, nb, &out[0], sh.rows*4) }},
			{"x2/vnni", func() { matQ8x2VNNI(wp, rb, sh.rows, xp, xs, nb, &out[0], sh.rows*4) }},
			{"x4/avx2", func() { matQ8x4(wp, rb, sh.rows, xp, xs, nb, &out[0], sh.rows*4) }},
			{"x4/vnni", func() { matQ8x4VNNI(wp, rb, sh.rows, xp, xs, nb, &out[0], sh.rows*4) }},
		}
		for _, k := range kernels {
			b.Run(sh.name+"/"+k.name, func(b *testing.B) {
				b.SetBytes(int64(sh.rows * rb))
				for b.Loop() {
					k.f()
				}
			})
		}
	}
}

// TestGemmQ8VNNIEdges: the batched VNNI products (pairs of groups as
// sixteen tokens, a group of eight, the tokens left over, and the table
// of block sums the sixteen-token kernel starts from) against the AVX2
// path, on weights holding every extreme vq8Weights makes, for token
// counts around each boundary (13 is the least a pair takes, 16 a full
// one, 25 to 28 a pair and a group with one to four left), row counts
// around four, and a matrix whose chunks span several tiles, so that the
// table is remade mid-call. NaN scales must keep their payloads too:
// activation scales are never NaN, so both paths return the weight's.
func TestGemmQ8VNNIEdges(t *testing.T) {
	needQ8VNNI(t)
	rng := rand.New(rand.NewPCG(41, 42))
	shapes := []struct{ rows, nb int }{{1, 1}, {2, 24}, {3, 2}, {4, 24}, {5, 1}, {6, 24}, {7, 2}, {8, 24}, {9, 3}, {13, 2}, {33, 24}, {1100, 24}}
	ns := []int{5, 12, 13, 14, 16, 17, 21, 25, 26, 27, 28, 29, 31, 32, 33}
	for k, sh := range shapes {
		w := &Matrix{Type: tensor.Q8_0, Rows: sh.rows, Cols: sh.nb * 32, Data: vq8Weights(t, rng, sh.rows, sh.nb)}
		for j, n := range ns {
			if sh.rows > 100 && j%4 != k%4 {
				continue // the big matrix: a few counts are enough
			}
			x := randFloats(rng, n*w.Cols)
			var want, got []float32
			func() {
				defer func() { useVNNI = hasVNNI }()
				useVNNI = false
				want = matMulNew(1, w, x, n)
				useVNNI = true
				got = matMulNew(1, w, x, n)
			}()
			for i := range want {
				a, b := want[i], got[i]
				if math.Float32bits(a) != math.Float32bits(b) {
					t.Fatalf("%dx%d, n=%d: token %d row %d: VNNI %g (%#x), AVX2 %g (%#x)",
						sh.rows, w.Cols, n, i/sh.rows, i%sh.rows, b, math.Float32bits(b), a, math.Float32bits(a))
				}
			}
		}
	}
}

// The dispatch picks the VNNI twins for exactly the types that have them:
// every other type keeps the kernels it was given.
func TestVNNISelection(t *testing.T) {
	ptr := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	if g16, g8 := vnniBatched(tensor.Q4_K, gemmQ4Kx8); ptr(g16) != ptr(gemmQ4Kx16VNNI) || ptr(g8) != ptr(gemmQ4Kx8VNNI) {
		t.Error("Q4_K's batched products are not the VNNI kernels")
	}
	if g16, g8 := vnniBatched(tensor.Q6_K, gemmQ6Kx8); ptr(g16) != ptr(gemmQ6Kx16VNNI) || ptr(g8) != ptr(gemmQ6Kx8VNNI) {
		t.Error("Q6_K's batched products are not the VNNI kernels")
	}
	if g16, g8 := vnniBatched(tensor.Q5_K, gemmQ5Kx8); ptr(g16) != ptr(gemmQ5Kx16VNNI) || ptr(g8) != ptr(gemmQ5Kx8) {
		t.Error("Q5_K's batched products are not the VNNI sixteen-token kernel and the AVX2 eight-token one")
	}
	for _, c := range []struct {
		t      tensor.DType
		g8, v8 gemmX8 // the eight-token kernel, and its VNNI twin or itself
		v16    gemmX16
		q1     quantX1
		q2, q4 quantX4
		v1     quantX1
	}{
		{tensor.Q3_K, gemmQ3Kx8, gemmQ3Kx8, nil, matQ3Kx1, matQ3Kx2, matQ3Kx4, matQ3Kx1VNNI},
		{tensor.Q4_0, gemmQ40x8, gemmQ40x8, gemmQ40x16VNNI, matQ4x1, matQ4x2, matQ4x4, matQ4x1VNNI},
		{tensor.Q4_1, gemmQ41x8, gemmQ41x8, gemmQ41x16VNNI, matQ41x1, matQ41x2, matQ41x4, matQ41x1},
		{tensor.Q5_0, gemmQ50x8, gemmQ50x8VNNI, gemmQ50x16VNNI, matQ50x1, matQ50x2, matQ50x4, matQ50x1},
		{tensor.Q5_1, gemmQ51x8, gemmQ51x8VNNI, gemmQ51x16VNNI, matQ51x1, matQ51x2, matQ51x4, matQ51x1},
	} {
		if g16, g8 := vnniBatched(c.t, c.g8); (g16 == nil) != (c.v16 == nil) || g16 != nil && ptr(g16) != ptr(c.v16) || ptr(g8) != ptr(c.v8) {
			t.Errorf("%s: batched product not the expected one", c.t)
		}
		q1, _, _ := vnniTwins(c.t, c.q1, c.q2, c.q4)
		if ptr(q1) != ptr(c.v1) {
			t.Errorf("%s: one-token kernel not the expected one", c.t)
		}
	}
	q1, q2, q4 := vnniTwins(tensor.Q8_0, matQ8x1, matQ8x2, matQ8x4)
	if ptr(q1) != ptr(matQ8x1VNNI) || ptr(q2) != ptr(matQ8x2VNNI) || ptr(q4) != ptr(matQ8x4VNNI) {
		t.Error("Q8_0's one- to four-token kernels are not the VNNI ones")
	}
	q1, q2, q4 = vnniTwins(tensor.Q4_0, matQ4x1, matQ4x2, matQ4x4)
	if ptr(q1) != ptr(matQ4x1VNNI) || ptr(q2) != ptr(matQ4x2VNNI) || ptr(q4) != ptr(matQ4x4VNNI) {
		t.Error("Q4_0's one- to four-token kernels are not the VNNI ones")
	}
}

// BenchmarkQ4VNNIKernels compares Q4_0's one- and four-token kernels with
// their VNNI twins, in cache (768 rows) and out of it (65536), one thread:
//
//	go test -run '^$' -bench Q4VNNIKernels ./internal/kernels/
func BenchmarkQ4VNNIKernels(b *testing.B) {
	if !hasVNNI {
		b.Skip("no AVX-512 VNNI on this CPU")
	}
	const cols = 768
	for _, rows := range []int{768, 65536} {
		w := benchMatrix(b, tensor.Q4_0, rows, cols)
		rb, _ := tensor.Q4_0.RowBytes(cols)
		nb := cols / 32
		x := randFloats(rand.New(rand.NewPCG(2, 3)), 4*cols)
		xq := make([]byte, 4*nb*xBlockBytes)
		for i := range 4 {
			quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
		}
		out := make([]float32, 4*rows)
		wp, xp := unsafe.Pointer(&w.Data[0]), unsafe.Pointer(&xq[0])
		for _, k := range []struct {
			name string
			run  func()
		}{
			{"x1", func() { matQ4x1(wp, rb, rows, xp, nb, &out[0]) }},
			{"x1vnni", func() { matQ4x1VNNI(wp, rb, rows, xp, nb, &out[0]) }},
			{"x4", func() { matQ4x4(wp, rb, rows, xp, nb*xBlockBytes, nb, &out[0], rows*4) }},
			{"x4vnni", func() { matQ4x4VNNI(wp, rb, rows, xp, nb*xBlockBytes, nb, &out[0], rows*4) }},
		} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, k.name), func(b *testing.B) {
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					k.run()
				}
			})
		}
	}
}
