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
	checkHeads("HeadScores", "floats", nh, hd, len(q), len(k), stride, koff, rows)
	checkHeadRows("HeadScores", "out", nh, rows, outStride, len(out))
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
	checkHeads("HeadAccum", "floats", nh, hd, len(o), len(v), stride, voff, rows)
	checkHeadRows("HeadAccum", "weight", nh, rows, wStride, len(w))
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
// slice (q or o) and every head's slice of every row lies inside the
// kvLen-element cache (unit names its elements in the message): the
// assembly must never read or write past a slice.
func checkHeads(op, unit string, nh, hd, perHead, kvLen, stride int, off []int32, rows int) {
	if nh*hd > perHead {
		panic(fmt.Sprintf("kernels: %s of %d heads of %d floats needs %d, got %d", op, nh, hd, nh*hd, perHead))
	}
	for h, o := range off {
		if o < 0 || int(o)+hd > stride || (rows-1)*stride+int(o)+hd > kvLen {
			panic(fmt.Sprintf("kernels: %s head %d at offset %d (+%d) of %d rows at stride %d does not fit %d %s", op, h, o, hd, rows, stride, kvLen, unit))
		}
	}
}

// checkHeadRows panics unless nh heads' rows of scores or weights, one
// head every stride floats, fit in n.
func checkHeadRows(op, what string, nh, rows, stride, n int) {
	if (nh-1)*stride+rows > n || stride < rows {
		panic(fmt.Sprintf("kernels: %s of %d heads x %d rows at %s stride %d needs %d floats, got %d", op, nh, rows, what, stride, (nh-1)*stride+rows, n))
	}
}
