package kernels

import "fmt"

// HeadScores and HeadAccum are attention's inner loops for several heads
// at once, walking the cached positions in order and, at each position,
// every head: one sweep along each key or value row instead of one strided
// sweep per head. At decode the cache comes from memory, and a row read
// front to back is what the prefetchers serve best. Each head's numbers
// are still exactly those of Dot and of axpyGo per position: only the order in
// which independent results are produced changes.

// HeadScores sets out[h*outStride+i] = Dot(q[h*hd:(h+1)*hd],
// k[i*stride+koff[h]:]) for every head h < len(koff) and row i < rows.
func HeadScores(out []float32, outStride int, q []float32, hd int, k []float32, stride int, koff []int32, rows int) {
	nh := len(koff)
	if nh == 0 || rows == 0 {
		return
	}
	checkHeads("HeadScores", nh, hd, len(q), k, stride, koff, rows)
	if (nh-1)*outStride+rows > len(out) || outStride < rows {
		panic(fmt.Sprintf("kernels: HeadScores of %d heads x %d rows at out stride %d needs %d floats, got %d", nh, rows, outStride, (nh-1)*outStride+rows, len(out)))
	}
	if hd == 0 {
		for h := 0; h < nh; h++ {
			clear(out[h*outStride : h*outStride+rows])
		}
		return
	}
	if useSIMD {
		headScoresSIMD(out, outStride, q, hd, k, stride, koff, rows)
		return
	}
	for i := 0; i < rows; i++ {
		for h, off := range koff {
			r := i*stride + int(off)
			out[h*outStride+i] = dotF32Go(q[h*hd:(h+1)*hd], k[r:r+hd])
		}
	}
}

// HeadAccum adds w[h*wStride+i]·v[i*stride+voff[h]+j] to o[h*hd+j] for j <
// hd, for rows i = 0, 1, ... rows-1 in turn and every head h < len(voff):
// per head, bit for bit what rows calls of axpyGo (generic.go) give.
func HeadAccum(o []float32, hd int, w []float32, wStride int, v []float32, stride int, voff []int32, rows int) {
	nh := len(voff)
	if nh == 0 || rows == 0 || hd == 0 {
		return
	}
	checkHeads("HeadAccum", nh, hd, len(o), v, stride, voff, rows)
	if (nh-1)*wStride+rows > len(w) || wStride < rows {
		panic(fmt.Sprintf("kernels: HeadAccum of %d heads x %d rows at weight stride %d needs %d weights, got %d", nh, rows, wStride, (nh-1)*wStride+rows, len(w)))
	}
	if useSIMD {
		headAccumSIMD(o, hd, w, wStride, v, stride, voff, rows)
		return
	}
	for i := 0; i < rows; i++ {
		for h, off := range voff {
			r := i*stride + int(off)
			axpyGo(o[h*hd:(h+1)*hd], w[h*wStride+i], v[r:r+hd])
		}
	}
}

// checkHeads panics unless nh heads of hd floats fit in the per-head
// slice (q or o) and every head's slice of every row lies inside kv: the
// assembly must never read or write past a slice.
func checkHeads(op string, nh, hd, perHead int, kv []float32, stride int, off []int32, rows int) {
	if nh*hd > perHead {
		panic(fmt.Sprintf("kernels: %s of %d heads of %d floats needs %d, got %d", op, nh, hd, nh*hd, perHead))
	}
	for h, o := range off {
		if o < 0 || int(o)+hd > stride || (rows-1)*stride+int(o)+hd > len(kv) {
			panic(fmt.Sprintf("kernels: %s head %d at offset %d (+%d) of %d rows at stride %d does not fit %d floats", op, h, o, hd, rows, stride, len(kv)))
		}
	}
}
