//go:build amd64 && !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// hasAVX2 reports whether this CPU (and OS) runs the AVX2+FMA+F16C kernels.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// useSIMD selects the assembly kernels. Tests clear it to run the pure-Go
// kernels on the same inputs and demand identical bits.
var useSIMD = hasAVX2

func features() string {
	switch {
	case hasAVX2 && useVNNI:
		return "avx2 fma f16c avx512-vnni"
	case hasAVX2:
		return "avx2 fma f16c"
	}
	return "generic"
}

// Assembly kernels (simd_plain*_amd64.s, simd_quant_amd64.s,
// simd_qx_amd64.s). The x1 forms write out[r] for rows r < rows of one
// token; the x3 and x4 forms do three or four tokens at once, token t
// reading x+t*xstride and writing out+t*ostride (strides in bytes), so
// each weight block loaded serves every token of the call.

//go:noescape
func matF32x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)

// matF32x1s, matF16x1s and matBF16x1s are matF32x1, matF16x1 and
// matBF16x1 for 4*rows rows read as four streams of rows rows, stride
// bytes apart, one row of each at a time; cols must be a multiple of 16
// (simd_plain_amd64.s).
//
//go:noescape
func matF32x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)

//go:noescape
func matF16x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)

//go:noescape
func matBF16x1s(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)

// matF16x1sn and matBF16x1sn are matF16x1s and matBF16x1s that prefetch
// their streams non-temporally, for the one-token product
// (simd_plain_amd64.s).
//
//go:noescape
func matF16x1sn(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)

//go:noescape
func matBF16x1sn(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)

//go:noescape
func matF32x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

// matF32x3 and its F16 and BF16 twins do two rows by three tokens.
//
//go:noescape
func matF32x3(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

//go:noescape
func matF16x3(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

//go:noescape
func matBF16x3(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

//go:noescape
func matF16x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)

//go:noescape
func matF16x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

//go:noescape
func matBF16x1(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)

//go:noescape
func matBF16x4(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)

//go:noescape
func matQ8x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ8x1s and matQ8x2s are matQ8x1 and matQ8x2 for
// 4*rows rows read as four streams of rows rows, stride bytes apart, one
// row of each at a time (simd_quant_amd64.s says why).
//
//go:noescape
func matQ8x1s(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32, stride int)

//go:noescape
func matQ8x2s(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int, stride int)

//go:noescape
func matQ8x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ8x2 and matQ4x2 are the x4 kernels for two tokens.
//
//go:noescape
func matQ8x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ4x2(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ4x1(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ4x4(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func quantizeAVX2(dst *byte, x *float32, nb int)

// fmaAsm is VFMADD231SS, for testing fma32.
//
//go:noescape
func fmaAsm(a, b, c float32) float32

type plainX1 func(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32)
type plainX1s func(w unsafe.Pointer, rowBytes, rows int, x *float32, cols int, out *float32, stride int)
type plainX4 func(w unsafe.Pointer, rowBytes, rows int, x *float32, xstride, cols int, out *float32, ostride int)
type quantX1 func(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)
type quantX4 func(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// tileBytes bounds the weight bytes one pass over the token groups covers,
// so that with many tokens the tile stays in L2 while every group of four
// tokens streams over it.
const tileBytes = 128 << 10

// matRowsSIMD is matRowsGo on the assembly kernels; st, if not nil, is
// the calling thread's scratch for the sixteen-token kernels' stores
// (x16Stores).
func matRowsSIMD(w *Matrix, r0, r1 int, x []float32, xq, xi []byte, n int, out []float32, ostride int, st *x16Stores) {
	rb, _ := w.Type.RowBytes(w.Cols)
	cols := w.Cols
	// Tiles of a multiple of four rows: the quantised kernels take rows
	// in fours, and a partial four costs as much as a whole one. With
	// one pass per tile (n of 1 to 4) tiling changes nothing but the
	// number of calls.
	tile := max(4, min(r1-r0, tileBytes/rb&^3))
	var p1 plainX1
	var s1, s1n plainX1s // p1 over four streams; s1n the same for one token (see below)
	var p3, p4 plainX4
	var q1 quantX1
	var q2, q4 quantX4
	var g8 gemmX8 // the eight-token kernel, where there is one (not Q8_0's: gemmQ8Rows)
	switch w.Type {
	case tensor.F32:
		p1, p3, p4, s1, s1n = matF32x1, matF32x3, matF32x4, matF32x1s, matF32x1s
	case tensor.F16:
		p1, p3, p4, s1, s1n = matF16x1, matF16x3, matF16x4, matF16x1s, matF16x1sn
	case tensor.BF16:
		p1, p3, p4, s1, s1n = matBF16x1, matBF16x3, matBF16x4, matBF16x1s, matBF16x1sn
	default:
		var ok bool
		if q1, q2, q4, g8, ok = quantKernels(w.Type); !ok {
			// No assembly kernel: the Go one is the only path.
			matRowsGo(w, r0, r1, x, xq, n, out, ostride)
			return
		}
	}
	var g16 gemmX16 // a sixteen-token kernel, where there is one
	if vnniOn() {
		q1, q2, q4 = vnniTwins(w.Type, q1, q2, q4)
		g16, g8 = vnniBatched(w.Type, g8)
	}
	nb := cols / 32
	if useGemm && n >= gemmMinTokens && nb <= gemmMaxBlocks {
		switch {
		case w.Type == tensor.Q8_0:
			gemmQ8Rows(w, r0, r1, tile, xq, xi, n, out, ostride, q1, q2, q4, st)
			return
		case g8 != nil:
			gemmKRows(g16, g8, q1, q2, q4, w, r0, r1, tile, xq, xi, n, out, ostride, st)
			return
		}
	}
	// The products bound by memory read four far-apart streams of rows
	// (matQ8Strided says which), all but the last (r1-r0)%4 rows. One pass
	// over the rows reuses nothing across tiles: the longer the streams,
	// the better the prefetcher follows them. When the pool splits the
	// matrix, a thread's claim bounds them: half of what is left of its
	// run of chunks, at most four (1 MiB), then less (pool_claim.go),
	// down to one chunk of 256 KiB at most (chunkRows), so that the
	// threads finish close together.
	switch {
	case s1 != nil && n == 1 && cols%16 == 0:
		// F16 and BF16 prefetch non-temporally here, as matQ8x1s does,
		// so the weights read once a step leave the KV cache in L3.
		// In-process A/B on the 110M shape, 2 threads: F16 1.005-1.064x
		// (four runs), BF16 1.003-1.069x (three), against a null A/B of
		// 0.97; F32 0.99x, so not for F32, whose step the weights
		// dominate.
		r0 = matPlainStrided(s1n, w, rb, r0, r1, x, cols, 1, out, ostride)
	case w.Type == tensor.Q8_0 && n <= 2:
		r0 = matQ8Strided(w, rb, r0, r1, xq, nb, n, out, ostride)
	}
	// Three Q8_0 tokens, and two to seven (but four) of a plain type, take
	// a strided pass per token, so they stream tile by tile and the later
	// passes read from L2. Those plain steps are still bound by memory:
	// measured at 32000x768, F32 and F16, the strided passes beat the
	// threes and ones of plainTile, which read two adjacent rows side by
	// side or one stream, by 1.3-2.1x for two and three tokens, 1.0-1.07x
	// for five and 1.13-1.39x for six and seven; four tokens of the
	// four-token kernel, and eight or more, gain nothing.
	plainTiled := s1 != nil && n >= 2 && n < 8 && n != 4 && cols%16 == 0
	for t0 := r0; t0 < r1; t0 += tile {
		t1 := min(r1, t0+tile)
		rest := t0
		switch {
		case plainTiled:
			rest = matPlainStrided(s1, w, rb, t0, t1, x, cols, n, out, ostride)
		case w.Type == tensor.Q8_0 && n == 3:
			rest = matQ8Strided(w, rb, t0, t1, xq, nb, n, out, ostride)
		}
		if rest == t1 {
			continue
		}
		wp := unsafe.Pointer(&w.Data[rest*rb])
		if p1 != nil {
			plainTile(p1, p3, p4, wp, rb, t1-rest, x, cols, n, out[rest:], ostride)
			continue
		}
		quantTile(q1, q2, q4, wp, rb, t1-rest, xq, nb, 0, n, out[rest:], ostride)
	}
}

// quantKernels returns the AVX2 kernels of quantised weights of type t:
// the four-row ones for one, two and four tokens, and the eight-token one
// where there is one (not Q8_0's: gemmQ8Rows takes its batched products).
// ok is false for a type without assembly kernels.
func quantKernels(t tensor.DType) (q1 quantX1, q2, q4 quantX4, g8 gemmX8, ok bool) {
	switch t {
	case tensor.Q8_0:
		return matQ8x1, matQ8x2, matQ8x4, nil, true
	case tensor.Q4_0:
		return matQ4x1, matQ4x2, matQ4x4, gemmQ40x8, true
	case tensor.Q4_1:
		return matQ41x1, matQ41x2, matQ41x4, gemmQ41x8, true
	case tensor.Q5_0:
		return matQ50x1, matQ50x2, matQ50x4, gemmQ50x8, true
	case tensor.Q5_1:
		return matQ51x1, matQ51x2, matQ51x4, gemmQ51x8, true
	case tensor.Q4_K:
		return matQ4Kx1, matQ4Kx2, matQ4Kx4, gemmQ4Kx8, true
	case tensor.Q5_K:
		return matQ5Kx1, matQ5Kx2, matQ5Kx4, gemmQ5Kx8, true
	case tensor.Q6_K:
		return matQ6Kx1, matQ6Kx2, matQ6Kx4, gemmQ6Kx8, true
	case tensor.Q3_K:
		return matQ3Kx1, matQ3Kx2, matQ3Kx4, gemmQ3Kx8, true
	case tensor.Q2_K:
		return matQ2Kx1, matQ2Kx2, matQ2Kx4, gemmQ2Kx8, true
	}
	return nil, nil, nil, nil, false
}

// plainTile runs the kernels of a plain type (p1, p3 and p4: one, three
// and four tokens) on rows rows at wp for n tokens. out starts at the
// tile's first row.
func plainTile(p1 plainX1, p3, p4 plainX4, wp unsafe.Pointer, rb, rows int, x []float32, cols, n int, out []float32, ostride int) {
	// Two rows by three tokens keeps the FMA units busier than one row by
	// four, but a one-token pass rereads the rows for a single token: so
	// as many threes as leave a multiple of four, then fours, then ones.
	i := 0
	fours := n % 3
	if 4*fours > n {
		fours = n / 4
	}
	for ; i+3 <= n-4*fours; i += 3 {
		p3(wp, rb, rows, &x[i*cols], cols*4, cols, &out[i*ostride], ostride*4)
	}
	for ; i+4 <= n; i += 4 {
		p4(wp, rb, rows, &x[i*cols], cols*4, cols, &out[i*ostride], ostride*4)
	}
	for ; i < n; i++ {
		p1(wp, rb, rows, &x[i*cols], cols, &out[i*ostride])
	}
}

// matPlainStrided computes rows [r0, r1) of the product of n tokens with
// plain weights (cols a multiple of 16) with s1, one pass per token, each
// as four streams of a quarter of the rows, and returns the first row it
// left: the last (r1-r0)%4, for the adjacent kernels.
func matPlainStrided(s1 plainX1s, w *Matrix, rb, r0, r1 int, x []float32, cols, n int, out []float32, ostride int) int {
	q := (r1 - r0) / 4
	if q == 0 {
		return r0
	}
	wp := unsafe.Pointer(&w.Data[r0*rb])
	for i := 0; i < n; i++ {
		s1(wp, rb, q, &x[i*cols], cols, &out[i*ostride+r0], q*rb)
	}
	return r0 + 4*q
}

// quantTile runs the four-row kernels on rows rows at wp for tokens
// [i, n): fours, then a two, then ones. out starts at the tile's first
// row.
func quantTile(q1 quantX1, q2, q4 quantX4, wp unsafe.Pointer, rb, rows int, xq []byte, nb, i, n int, out []float32, ostride int) {
	xs := nb * xBlockBytes
	for ; i+4 <= n; i += 4 {
		q4(wp, rb, rows, unsafe.Pointer(&xq[i*xs]), xs, nb, &out[i*ostride], ostride*4)
	}
	if i+2 <= n {
		q2(wp, rb, rows, unsafe.Pointer(&xq[i*xs]), xs, nb, &out[i*ostride], ostride*4)
		i += 2
	}
	for ; i < n; i++ {
		q1(wp, rb, rows, unsafe.Pointer(&xq[i*xs]), nb, &out[i*ostride])
	}
}

func dotSIMD(a, b []float32) float32 {
	var r float32
	matF32x1(unsafe.Pointer(&a[0]), 0, 1, &b[0], len(a), &r)
	return r
}

func quantizeSIMD(dst []byte, x []float32) {
	nb := len(x) / 32
	if nb == 0 {
		return
	}
	_ = dst[nb*xBlockBytes-1]
	quantizeAVX2(&dst[0], &x[0], nb)
}

// matQ8Strided computes rows [r0, r1) of the product of n = 1, 2 or 3
// tokens with Q8_0 weights with matQ8x1s or matQ8x2s (two tokens, then the
// third), as four streams of a quarter of the rows each, and returns the
// first row it left: the last (r1-r0)%4, for the adjacent kernels.
//
// Only the products bound by memory have strided kernels: Q8_0's for one
// to three tokens and the plain types' for one to seven but four
// (matPlainStrided). Measured on a Zen 3, four tokens of Q8_0, and Q4_0,
// the legacy types and the K-quants even for one token, unpack or
// multiply enough per block to be bound by arithmetic; strided Q8_0
// four-token and Q4_0 one-token kernels ran no faster than the adjacent
// ones.
func matQ8Strided(w *Matrix, rb, r0, r1 int, xq []byte, nb, n int, out []float32, ostride int) int {
	q := (r1 - r0) / 4
	if q == 0 {
		return r0
	}
	s1, s2 := matQ8x1s, matQ8x2s
	if vnniOn() {
		s1, s2 = matQ8x1sVNNI, matQ8x2sVNNI
	}
	wp, xs := unsafe.Pointer(&w.Data[r0*rb]), nb*xBlockBytes
	if n == 1 {
		s1(wp, rb, q, unsafe.Pointer(&xq[0]), nb, &out[r0], q*rb)
		return r0 + 4*q
	}
	s2(wp, rb, q, unsafe.Pointer(&xq[0]), xs, nb, &out[r0], ostride*4, q*rb)
	if n == 3 {
		s1(wp, rb, q, unsafe.Pointer(&xq[2*xs]), nb, &out[2*ostride+r0], q*rb)
	}
	return r0 + 4*q
}
