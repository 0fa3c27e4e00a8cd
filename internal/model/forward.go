package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// Seq is one sequence's share of a forward pass: the tokens to feed at
// positions Pos, Pos+1, ..., and where to put the results.
type Seq struct {
	Tokens []int
	Pos    int      // position of Tokens[0]; positions before it are in Cache
	Cache  SeqCache // must already have room for Pos+len(Tokens) positions
	// Logits, when non-nil, receives the logits of the last token
	// (Config.Vocab values). Chunks of a prompt that do not end it leave it
	// nil and skip the classifier.
	Logits []float32
	// Err is set by Forward when this sequence failed (for example its KV
	// storage refused a read). The other sequences of the batch are
	// unaffected.
	Err error
}

// ErrBatchTooLarge is returned when a batch holds more tokens than the
// Runner was sized for.
var ErrBatchTooLarge = errors.New("model: batch exceeds the runner's token capacity")

// Runner runs forward passes of one Model. It holds the scratch memory for
// up to MaxTokens tokens per call, so steady-state forward passes do not
// allocate. A Runner is not safe for concurrent use; the engine owns one.
type Runner struct {
	m    *Model
	pool *kernels.Pool
	max  int
	ctx  int // the longest sequence Forward accepts

	x, xb, xb2 []float32 // [n][Dim]
	q          []float32 // [n][Heads*HeadDim]
	k, v       []float32 // [n][KVDim]
	hb, hb2    []float32 // [n][Hidden]
	att        []float32 // [n][Heads*HeadDim]
	logits     []float32 // [nLogits][Vocab]
	scores     []float32 // [chunk][heads per group][ctx], one row per attention chunk
	attendFn   func(chunk, lo, hi int)
	cos, sin   []float32 // [n][RopeDim/2]
	spans      [][]Span  // per sequence, reused
	tokSeq     []int32   // token -> index in the batch
	tokPos     []int32   // token -> position
	lastRow    []int32   // sequences needing logits -> their last token's row
	failed     []bool
	prods      [3]kernels.Product // MatMuls argument, kept to not allocate
	kvOff      []int32            // head -> offset of its key/value head in a cache row
	attnGroups int                // head groups per token in the current attention loop

	// The per-token passes (tokens.go): the layer they run for, each
	// token's cache slot (nil where its sequence failed) and whether it
	// holds binary16, and the passes as method values, made once.
	layerIdx                   int
	kSlot, vSlot               [][]float32
	slotF16                    []bool
	prepFn, residualFn, siluFn func(chunk, lo, hi int)
}

// NewRunner returns a Runner for batches of up to maxTokens tokens in all,
// over sequences of up to maxContext positions, computing matrix products
// on pool. maxContext <= 0, or above the model's context, means the
// model's. The attention scratch grows with it: sized by the model alone,
// a 131,072-token model served at 4,096 took 32 times the memory it needs
// (134 MB on 2 threads for Llama 3.1 8B, a gigabyte on 16).
func (m *Model) NewRunner(pool *kernels.Pool, maxTokens, maxContext int) *Runner {
	c := &m.Config
	if maxContext <= 0 || maxContext > c.ContextLen {
		maxContext = c.ContextLen
	}
	qd := c.Heads * c.HeadDim
	r := &Runner{m: m, pool: pool, max: maxTokens, ctx: maxContext}
	r.x = make([]float32, maxTokens*c.Dim)
	r.xb = make([]float32, maxTokens*c.Dim)
	r.xb2 = make([]float32, maxTokens*c.Dim)
	r.q = make([]float32, maxTokens*qd)
	r.att = make([]float32, maxTokens*qd)
	r.k = make([]float32, maxTokens*c.KVDim())
	r.v = make([]float32, maxTokens*c.KVDim())
	r.hb = make([]float32, maxTokens*c.Hidden)
	r.hb2 = make([]float32, maxTokens*c.Hidden)
	// Scores of up to every head of a token per chunk of the attention
	// loop (see attend).
	r.scores = make([]float32, pool.ForChunks(maxTokens*c.Heads)*c.Heads*maxContext)
	r.kvOff = make([]int32, c.Heads)
	for h := range r.kvOff {
		r.kvOff[h] = int32((h / (c.Heads / c.KVHeads)) * c.HeadDim)
	}
	r.attendFn = r.attend
	r.cos = make([]float32, maxTokens*c.RopeDim/2)
	r.sin = make([]float32, maxTokens*c.RopeDim/2)
	r.tokSeq = make([]int32, maxTokens)
	r.tokPos = make([]int32, maxTokens)
	r.kSlot = make([][]float32, maxTokens)
	r.vSlot = make([][]float32, maxTokens)
	r.slotF16 = make([]bool, maxTokens)
	r.prepFn, r.residualFn, r.siluFn = r.prepTokens, r.residualTokens, r.siluTokens
	return r
}

// MaxTokens is the most tokens one Forward call may carry.
func (r *Runner) MaxTokens() int { return r.max }

// MaxContext is the most positions a sequence may span.
func (r *Runner) MaxContext() int { return r.ctx }

// Forward runs every sequence's tokens through the model, writing their
// keys and values into their caches and, where asked, the last token's
// logits. A sequence whose cache fails gets Err set and its rows are
// dropped; the call as a whole fails only for a malformed batch.
func (r *Runner) Forward(seqs []*Seq) error {
	m, c := r.m, &r.m.Config
	n := 0
	for i, s := range seqs {
		s.Err = nil
		if len(s.Tokens) == 0 {
			return fmt.Errorf("model: sequence %d of the batch has no tokens", i)
		}
		if s.Pos < 0 || s.Pos+len(s.Tokens) > r.ctx {
			return fmt.Errorf("model: sequence %d spans positions [%d, %d), the runner's context is %d", i, s.Pos, s.Pos+len(s.Tokens), r.ctx)
		}
		if s.Logits != nil && len(s.Logits) != c.Vocab {
			return fmt.Errorf("model: sequence %d has a logits buffer of %d, want %d", i, len(s.Logits), c.Vocab)
		}
		n += len(s.Tokens)
	}
	if n > r.max {
		return fmt.Errorf("%w: %d tokens, capacity %d", ErrBatchTooLarge, n, r.max)
	}
	if cap(r.failed) < len(seqs) {
		r.failed = make([]bool, len(seqs))
		r.spans = make([][]Span, len(seqs))
	}
	r.failed = r.failed[:len(seqs)]
	clear(r.failed)

	// Embed and index tokens.
	row := 0
	for i, s := range seqs {
		for j, tok := range s.Tokens {
			if tok < 0 || tok >= c.Vocab {
				return fmt.Errorf("model: sequence %d has token id %d outside the vocabulary of %d", i, tok, c.Vocab)
			}
			kernels.RowTo(r.x[row*c.Dim:(row+1)*c.Dim], &m.Embed, tok)
			r.tokSeq[row] = int32(i)
			r.tokPos[row] = int32(s.Pos + j)
			r.ropeTables(row, s.Pos+j)
			row++
		}
	}

	for l := range m.Layers {
		r.layer(l, seqs, n)
	}

	// Classifier only for the rows that need logits.
	r.lastRow = r.lastRow[:0]
	row = 0
	for i, s := range seqs {
		row += len(s.Tokens)
		if s.Logits != nil && !r.failed[i] {
			r.lastRow = append(r.lastRow, int32(row-1))
		}
	}
	nl := len(r.lastRow)
	if nl == 0 {
		return nil
	}
	for j, src := range r.lastRow {
		kernels.RMSNorm(r.xb[j*c.Dim:(j+1)*c.Dim], r.x[int(src)*c.Dim:(int(src)+1)*c.Dim], m.OutNorm, c.NormEps)
	}
	if cap(r.logits) < nl*c.Vocab {
		r.logits = make([]float32, nl*c.Vocab)
	}
	r.pool.MatMul(r.logits[:nl*c.Vocab], &m.Output, r.xb[:nl*c.Dim], nl)
	j := 0
	for i, s := range seqs {
		if s.Logits != nil && !r.failed[i] {
			copy(s.Logits, r.logits[j*c.Vocab:(j+1)*c.Vocab])
			j++
		}
	}
	return nil
}

// ropeTables fills the rotation cosines and sines for one token. Frequencies
// follow the reference implementation in float32 so that greedy text matches
// it byte for byte.
func (r *Runner) ropeTables(row, pos int) {
	c := &r.m.Config
	half := c.RopeDim / 2
	p := float32(pos)
	if c.RopeScale != 1 {
		p = float32(float64(pos) / c.RopeScale)
	}
	for i := 0; i < half; i++ {
		exp := float32(2*i) / float32(c.RopeDim)
		freq := 1 / float32(math.Pow(c.RopeTheta, float64(exp)))
		if c.RopeFreqFactors != nil {
			freq /= c.RopeFreqFactors[i]
		}
		val := p * freq
		r.cos[row*half+i] = float32(math.Cos(float64(val)))
		r.sin[row*half+i] = float32(math.Sin(float64(val)))
	}
}

// rope rotates one head in place.
func (r *Runner) rope(head []float32, row int) {
	c := &r.m.Config
	half := c.RopeDim / 2
	cos, sin := r.cos[row*half:(row+1)*half], r.sin[row*half:(row+1)*half]
	if c.RopeStyle == RopeAdjacent {
		for i := 0; i < half; i++ {
			v0, v1 := head[2*i], head[2*i+1]
			head[2*i] = v0*cos[i] - v1*sin[i]
			head[2*i+1] = v0*sin[i] + v1*cos[i]
		}
		return
	}
	for i := 0; i < half; i++ {
		v0, v1 := head[i], head[i+half]
		head[i] = v0*cos[i] - v1*sin[i]
		head[i+half] = v0*sin[i] + v1*cos[i]
	}
}

func (r *Runner) layer(l int, seqs []*Seq, n int) {
	m, c := r.m, &r.m.Config
	w := &m.Layers[l]
	D, KVD, HD := c.Dim, c.KVDim(), c.HeadDim
	QD := c.Heads * HD

	for t := 0; t < n; t++ {
		kernels.RMSNorm(r.xb[t*D:(t+1)*D], r.x[t*D:(t+1)*D], w.AttnNorm, c.NormEps)
	}
	// One pass of the pool for the three products of the same input.
	r.prods[0] = kernels.Product{W: &w.Q, Out: r.q[:n*QD]}
	r.prods[1] = kernels.Product{W: &w.K, Out: r.k[:n*KVD]}
	r.prods[2] = kernels.Product{W: &w.V, Out: r.v[:n*KVD]}
	r.pool.MatMuls(r.xb[:n*D], n, r.prods[:3])

	// Find every token's cache slot here, on the caller, in order: a
	// cache that fails fails its sequence there and then, and asks for no
	// slot past the failure; SeqCache promises nothing about concurrent
	// calls. Then the biases, RoPE and the stores (prepTokens), then seal
	// what was written and gather each sequence's spans once.
	row := 0
	for i, s := range seqs {
		f16 := s.Cache.KVType() == KVF16
		for j := range s.Tokens {
			t := row + j
			r.kSlot[t], r.vSlot[t] = nil, nil
			if r.failed[i] {
				continue
			}
			kd, vd, err := s.Cache.Slot(l, s.Pos+j)
			if err != nil {
				r.fail(i, s, err)
				continue
			}
			r.kSlot[t], r.vSlot[t], r.slotF16[t] = kd, vd, f16
		}
		row += len(s.Tokens)
	}
	r.layerIdx = l
	r.perToken(n, r.prepFn)
	// The slots point into the sequences' caches: held here, they would
	// keep a finished sequence's storage from the garbage collector.
	clear(r.kSlot[:n])
	clear(r.vSlot[:n])
	for i, s := range seqs {
		if !r.failed[i] {
			var err error
			if sl, ok := s.Cache.(KVSealer); ok {
				err = sl.Seal(l, s.Pos, s.Pos+len(s.Tokens))
			}
			if err == nil {
				r.spans[i], err = s.Cache.Spans(r.spans[i][:0], l, s.Pos+len(s.Tokens))
			}
			if err != nil {
				r.fail(i, s, err)
			}
		}
	}

	// Attention, one (token, group of heads) pair per item, spread over the
	// pool's threads: each token sees its own sequence's positions [0, pos]
	// and nothing else, and each item writes only its own output slice, so
	// the split cannot change a bit of the result.
	// A few tokens split their heads into small groups so that every
	// thread has several items; many tokens keep all heads of a token in
	// one sweep along the cache rows.
	// Groups of gs heads, just enough of them: 12 heads aimed at 8
	// groups make 6 of 2, not those and two empty ones, so that each
	// thread's run of items (the Pool hands each a contiguous run) holds
	// its share of the heads.
	want := min(c.Heads, max(1, (4*r.pool.Threads()+n-1)/n))
	gs := (c.Heads + want - 1) / want
	r.attnGroups = (c.Heads + gs - 1) / gs
	r.pool.For(n*r.attnGroups, r.attendFn)
	r.pool.MatMul(r.xb2[:n*D], &w.O, r.att[:n*QD], n)
	r.perToken(n, r.residualFn)

	H := c.Hidden
	r.prods[0] = kernels.Product{W: &w.Gate, Out: r.hb[:n*H]}
	r.prods[1] = kernels.Product{W: &w.Up, Out: r.hb2[:n*H]}
	r.pool.MatMuls(r.xb[:n*D], n, r.prods[:2])
	r.perToken(n, r.siluFn)
	r.pool.MatMul(r.xb2[:n*D], &w.Down, r.hb[:n*H], n)
	kernels.Add(r.x[:n*D], r.xb2[:n*D])
}

// attend computes attention for items [lo, hi) of the current layer, item
// i being token i/attnGroups and its heads group i%attnGroups, with chunk's
// scratch for scores. A group's heads walk the cached positions together,
// so each key and value row is read front to back once per group.
func (r *Runner) attend(chunk, lo, hi int) {
	c := &r.m.Config
	KVD, HD := c.KVDim(), c.HeadDim
	QD := c.Heads * HD
	scale := float32(math.Sqrt(float64(HD)))
	// ceil(Heads/G) gives back the group size layer chose, for every
	// Heads and group count it can choose.
	G := r.attnGroups
	gs := (c.Heads + G - 1) / G
	scores := r.scores[chunk*gs*r.ctx : (chunk+1)*gs*r.ctx]
	for i := lo; i < hi; i++ {
		t, g := i/G, i%G
		h0, h1 := g*gs, min(c.Heads, (g+1)*gs)
		if h0 >= h1 {
			continue
		}
		o := r.att[t*QD+h0*HD : t*QD+h1*HD]
		si := r.tokSeq[t]
		if r.failed[si] {
			clear(o)
			continue
		}
		n := int(r.tokPos[t]) + 1 // positions [0, pos] are visible
		spans := r.spans[si]
		q := r.q[t*QD+h0*HD : t*QD+h1*HD]
		offs := r.kvOff[h0:h1]
		// Head h-h0's scores are scores[(h-h0)*n : (h-h0+1)*n]. One call
		// per span (a page of the paged cache); the bits are those of a
		// Dot and an Axpy per position, so paging, batching and the head
		// grouping change nothing.
		p := 0
		for _, sp := range spans {
			nt := min(sp.Tokens(KVD), n-p)
			if nt <= 0 {
				break
			}
			if sp.Type == KVF16 {
				kernels.HeadScoresF16(scores[p:], n, q, HD, halves(sp.K), KVD, offs, nt)
			} else {
				kernels.HeadScores(scores[p:], n, q, HD, sp.K, KVD, offs, nt)
			}
			p += nt
		}
		for h := 0; h < h1-h0; h++ {
			sc := scores[h*n : (h+1)*n]
			for j := range sc {
				sc[j] /= scale
			}
			kernels.Softmax(sc)
		}
		clear(o)
		p = 0
		for _, sp := range spans {
			nt := min(sp.Tokens(KVD), n-p)
			if nt <= 0 {
				break
			}
			if sp.Type == KVF16 {
				kernels.HeadAccumF16(o, HD, scores[p:], n, halves(sp.V), KVD, offs, nt)
			} else {
				kernels.HeadAccum(o, HD, scores[p:], n, sp.V, KVD, offs, nt)
			}
			p += nt
		}
	}
}

func (r *Runner) fail(i int, s *Seq, err error) {
	r.failed[i] = true
	s.Err = err
}
