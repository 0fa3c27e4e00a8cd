//go:build amd64 && !purego

package kernels

import (
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// The batched K-quant path (gemm_kquant_amd64.s, gemm_q5k_amd64.s): Q2_K
// to Q6_K weights against eight tokens at a time, on the activations
// interleaveGroups lays out for the Q8_0 kernel. Unlike Q8_0 nothing is
// scanned first: K-quant quants are unsigned, so no weight defeats the
// kernels' byte products.

//go:noescape
func gemmQ4Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ2Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ3Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ6Kx8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// The legacy types' eight-token kernels (gemm_legacy_amd64.s), on the
// same interleaved activations; like the K-quants' their quants are
// unsigned (Q4_0's and Q5_0's offsets come off as multiples of Σx), so
// nothing is scanned first either.

//go:noescape
func gemmQ40x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ41x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ50x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

//go:noescape
func gemmQ51x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

type gemmX8 func(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmX16 is a sixteen-token kernel: gemmX8 on two interleaved groups of
// eight, xa (tokens 0..7) and xb (8..15).
type gemmX16 func(w unsafe.Pointer, rowBytes, rows int, xa, xb unsafe.Pointer, nb int, out *float32, ostride, ntok int)

// gemmKRows is matRowsSIMD for K-quant weights and at least gemmMinTokens
// tokens: tile by tile, pairs of groups of eight tokens take g16 where
// there is one (the second group holding at least gemmMinTokens), groups
// of eight (the last one partial if it holds at least gemmMinTokens) g8,
// and the tokens left over the four-row kernels q1, q2, q4. xi is as for
// gemmQ8Rows; nil has it built here. st is the calling thread's scratch
// for g16's stores (x16Stores), or nil.
func gemmKRows(g16 gemmX16, g8 gemmX8, q1 quantX1, q2, q4 quantX4, w *Matrix, r0, r1, tile int, xq, xi []byte, n int, out []float32, ostride int, st *x16Stores) {
	nb := w.Cols / 32
	if xi == nil {
		xi = interleaveGroups(nil, xq, n, nb)
	}
	rb, _ := w.Type.RowBytes(w.Cols)
	for t0 := r0; t0 < r1; t0 += tile {
		rows := min(tile, r1-t0)
		wp := unsafe.Pointer(&w.Data[t0*rb])
		group := func(g int) unsafe.Pointer { return unsafe.Pointer(&xi[g*nb*xiBlock]) }
		i, g := 0, 0
		for ; g16 != nil && n-i >= 8+gemmMinTokens; i, g = i+16, g+2 {
			xa, xb, nt := group(g), group(g+1), min(16, n-i)
			st.run(rows, nt, out[i*ostride+t0:], ostride, func(s0, sr int, o *float32, os int) {
				g16(unsafe.Add(wp, s0*rb), rb, sr, xa, xb, nb, o, os*4, nt)
			})
		}
		for ; n-i >= gemmMinTokens; i, g = i+8, g+1 {
			g8(wp, rb, rows, group(g), nb, &out[i*ostride+t0], ostride*4, min(8, n-i))
		}
		i = min(i, n)
		quantTile(q1, q2, q4, wp, rb, rows, xq, nb, i, n, out[t0:], ostride)
	}
}

// hasGemm reports whether weights of type t have an eight-token kernel.
func hasGemm(t tensor.DType) bool {
	switch t {
	case tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
		tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
		return true
	}
	return false
}
