package model

import "github.com/bulkhead-llm/bulkhead/internal/kernels"

// Most of the per-token work between a layer's products (the projections'
// biases, RoPE and the cache stores; the residual add and the FFN's norm;
// SiLU) runs on the Pool's threads when a step carries many tokens. On the
// calling goroutine alone it took about 9% of a 32-stream decode step's
// CPU while the other threads spun; shared, such a step (110M Q8_0, f16
// cache, position 72) takes 3-4% less time. The attention's norm and the
// last residual add stay on the caller: a tenth of the rest, not worth a
// pass of their own.
//
// Each token's values depend on that token's rows only, and the kernels
// give the same bits on any split of the rows (SiLUMul's SIMD body gives
// its scalar loop's), so where a token runs changes nothing.

// parallelTokens is the fewest tokens whose per-token work the Pool
// shares; below it a pass's hand-off costs more than the work.
const parallelTokens = 8

// perToken runs fn over tokens [0, n): on the Pool's threads from
// parallelTokens tokens, else on the caller (also with one thread, where
// For would do the same after taking the Pool).
func (r *Runner) perToken(n int, fn func(chunk, lo, hi int)) {
	if n >= parallelTokens && r.pool.Threads() > 1 {
		r.pool.For(n, fn)
		return
	}
	fn(0, 0, n)
}

// prepTokens adds the current layer's QKV biases, rotates the queries and
// keys, and stores each token's key and value into the cache slot that
// layer found for it (none where its sequence failed).
func (r *Runner) prepTokens(_, lo, hi int) {
	c := &r.m.Config
	w := &r.m.Layers[r.layerIdx]
	KVD, HD := c.KVDim(), c.HeadDim
	QD := c.Heads * HD
	for t := lo; t < hi; t++ {
		q, k, v := r.q[t*QD:(t+1)*QD], r.k[t*KVD:(t+1)*KVD], r.v[t*KVD:(t+1)*KVD]
		if w.QBias != nil {
			kernels.Add(q, w.QBias)
			kernels.Add(k, w.KBias)
			kernels.Add(v, w.VBias)
		}
		for h := 0; h < c.Heads; h++ {
			r.rope(q[h*HD:(h+1)*HD], t)
		}
		for h := 0; h < c.KVHeads; h++ {
			r.rope(k[h*HD:(h+1)*HD], t)
		}
		kd, vd := r.kSlot[t], r.vSlot[t]
		switch {
		case kd == nil:
		case r.slotF16[t]:
			kernels.ToF16(halves(kd), k)
			kernels.ToF16(halves(vd), v)
		default:
			copy(kd, k)
			copy(vd, v)
		}
	}
}

// residualTokens adds the attention's projection to the residual stream
// and normalises the result for the FFN.
func (r *Runner) residualTokens(_, lo, hi int) {
	c := &r.m.Config
	D := c.Dim
	w := &r.m.Layers[r.layerIdx]
	for t := lo; t < hi; t++ {
		x := r.x[t*D : (t+1)*D]
		kernels.Add(x, r.xb2[t*D:(t+1)*D])
		kernels.RMSNorm(r.xb[t*D:(t+1)*D], x, w.FFNNorm, c.NormEps)
	}
}

// siluTokens gates the FFN's up projection with SiLU of its gate.
func (r *Runner) siluTokens(_, lo, hi int) {
	H := r.m.Config.Hidden
	kernels.SiLUMul(r.hb[lo*H:hi*H], r.hb2[lo*H:hi*H])
}
