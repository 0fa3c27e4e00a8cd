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
// assembly must never read or write past a slice. The products are
// bounded by division (fits), so that a huge stride cannot wrap into
// range, and a negative rows or hd is refused, which the assembly would
// take for a count near 2^64 where the Go loops do nothing or panic.
func checkHeads(op, unit string, nh, hd, perHead, kvLen, stride int, off []int32, rows int) {
	if hd < 0 || rows < 0 {
		panic(fmt.Sprintf("kernels: %s of %d rows of heads of %d floats", op, rows, hd))
	}
	if !fits(nh, hd, perHead) {
		panic(fmt.Sprintf("kernels: %s of %d heads of %d floats needs %d·%d, got %d", op, nh, hd, nh, hd, perHead))
	}
	for h, o := range off {
		// Row rows-1 of the head ends at (rows-1)·stride + end.
		end := int(o) + hd
		if o < 0 || end > stride || end > kvLen || rows > 1 && !fits(rows-1, stride, kvLen-end) {
			panic(fmt.Sprintf("kernels: %s head %d at offset %d (+%d) of %d rows at stride %d does not fit %d %s", op, h, o, hd, rows, stride, kvLen, unit))
		}
	}
}

// checkHeadRows panics unless nh heads' rows of scores or weights, one
// head every stride floats, fit in n: (nh-1)·stride + rows <= n, bounded
// by division as in checkHeads. rows is not negative (checkHeads).
func checkHeadRows(op, what string, nh, rows, stride, n int) {
	if stride < rows || rows > n || nh > 1 && !fits(nh-1, stride, n-rows) {
		panic(fmt.Sprintf("kernels: %s of %d heads x %d rows at %s stride %d does not fit %d floats", op, nh, rows, what, stride, n))
	}
}
