package engine

import (
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// draws samples the next token of every sequence a step computed logits
// for, spread over the pool's threads. At temperature above zero a draw
// is a softmax over the whole vocabulary (about 0.3 ms for 32,000 tokens),
// so 32 streams drawn one after another on the step's goroutine held a
// core for some 10 ms a step while the others waited for the next forward
// pass. Each request's sampler owns its generator and scratch, and a draw
// reads only its own row of logits, so drawing rows concurrently gives
// every request exactly the tokens drawing them in turn gives.
type draws struct {
	threads *kernels.Pool
	reqs    []*request
	logits  [][]float32
	toks    []int
	lps     []*sample.Logprobs      // for requests that asked for them, else nil
	fn      func(chunk, lo, hi int) // bound once, so that a step allocates nothing
}

func newDraws(threads *kernels.Pool) *draws {
	d := &draws{threads: threads}
	d.fn = d.draw
	return d
}

// reset empties the list for the next step.
func (d *draws) reset() {
	clear(d.reqs) // let finished requests go
	clear(d.logits)
	clear(d.lps)
	d.reqs, d.logits, d.toks, d.lps = d.reqs[:0], d.logits[:0], d.toks[:0], d.lps[:0]
}

// add queues r's draw from logits.
func (d *draws) add(r *request, logits []float32) {
	d.reqs = append(d.reqs, r)
	d.logits = append(d.logits, logits)
	d.toks = append(d.toks, 0)
	d.lps = append(d.lps, nil)
}

// run draws every queued token. One draw runs on the caller: waking the
// pool for it would cost more than it saves.
func (d *draws) run() {
	switch len(d.reqs) {
	case 0:
	case 1:
		d.draw(0, 0, 1)
	default:
		d.threads.For(len(d.reqs), d.fn)
	}
}

func (d *draws) draw(_, lo, hi int) {
	for i := lo; i < hi; i++ {
		r := d.reqs[i]
		d.toks[i] = r.sampler.Next(d.logits[i])
		if r.logprobs {
			// The logits are the model's own: Next draws from its
			// copy after the biases and penalties.
			lp := r.sampler.Logprobs(d.logits[i], d.toks[i])
			d.lps[i] = &lp
		}
	}
}
