package engine

import (
	"errors"
	"sort"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// request is the engine's state for one admitted request.
type request struct {
	id     uint64 // engine-assigned, increasing in arrival order
	tenant string
	// tokens is the prompt followed by the tokens generated so far. After a
	// preemption the whole of it is prefilled again, which recomputes
	// exactly the KV that was dropped (the forward pass is batch-invariant).
	tokens    []int
	promptLen int
	maxTokens int
	fed       int  // leading tokens whose KV is in seq
	cached    int  // prompt tokens served from the prefix cache
	looked    bool // its prefix lookup has been reported (onLookup), once per request
	// prefillOnly requests stop after the first sampled token and hand
	// their KV over (Engine.Prefill) instead of freeing it.
	prefillOnly bool
	logprobs    bool    // the request asked for its tokens' log probabilities
	seq         *kv.Seq // nil while queued
	running     bool
	finished    bool

	sampler   *sample.Sampler
	stream    *Stream
	logits    []float32
	mseq      model.Seq
	stopWatch func() bool
}

func (r *request) generated() int { return len(r.tokens) - r.promptLen }

// scheduler decides what each step computes. It does no I/O and reads no
// clock: given the same arrivals and pool it makes the same decisions, so
// tests can drive it step by step.
type scheduler struct {
	pool       *kv.Pool
	budget     int
	maxRunning int
	vocab      int
	prefix     *prefix.Cache // nil: no prefix caching
	namespace  func(tenant string) string
	onLookup   func(tenant string, hitBlocks, missBlocks int)

	queue   []*request // waiting, ordered by id (arrival)
	running []*request // ordered by id
}

// stepPlan is one step's work.
type stepPlan struct {
	batch     []*request
	seqs      []*model.Seq
	tokens    int
	started   []*request
	preempted []*request
	// poolWaits is 1 when the first queued request that needs pages could
	// not get them in this plan, after the prefix cache gave what it
	// could; the requests behind it wait without trying.
	poolWaits int
}

func (s *scheduler) idle() bool { return len(s.queue) == 0 && len(s.running) == 0 }

func (s *scheduler) all() []*request {
	return append(append([]*request(nil), s.queue...), s.running...)
}

func (s *scheduler) enqueue(r *request) { s.queue = insertByID(s.queue, r) }

func insertByID(list []*request, r *request) []*request {
	i := sort.Search(len(list), func(i int) bool { return list[i].id > r.id })
	list = append(list, nil)
	copy(list[i+1:], list[i:])
	list[i] = r
	return list
}

func without(list []*request, r *request) []*request {
	for i, x := range list {
		if x == r {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// remove drops r from the scheduler and frees its pages.
func (s *scheduler) remove(r *request) {
	s.queue = without(s.queue, r)
	s.running = without(s.running, r)
	if r.seq != nil {
		r.seq.Free()
		r.seq = nil
	}
	r.running = false
}

// preempt frees r's pages and sends it back to the queue in arrival order;
// it will prefill its prompt and generated tokens again when it restarts.
func (s *scheduler) preempt(r *request) {
	s.running = without(s.running, r)
	r.seq.Free()
	r.seq, r.fed, r.running = nil, 0, false
	s.enqueue(r)
}

// plan picks the next batch: one token for every decoding sequence first,
// then prompt chunks for sequences still prefilling, then new requests in
// arrival order while the token budget, the running limit and the pool
// allow. When the pool cannot grow a decoding sequence, the latest arrival
// is preempted (possibly the sequence itself).
func (s *scheduler) plan() stepPlan {
	var p stepPlan
	left := s.budget
	// blockedTenant: tenants whose queued requests may not start this
	// step, because the tenant is at its own page quota. poolShort: a
	// sequence lost its pages to another's growth, so the pool itself is
	// short and no queued request may start this step.
	blockedTenant := map[string]bool{}
	poolShort := false

	// Pass 1: decoding sequences, one token each.
	for _, r := range append([]*request(nil), s.running...) {
		if !r.running || r.fed != len(r.tokens)-1 {
			continue
		}
		for {
			err := r.seq.Grow(len(r.tokens))
			if err == nil {
				break
			}
			if s.reclaim(err, nil) {
				continue // cached blocks gave way
			}
			victim := s.running[len(s.running)-1]
			if errors.Is(err, kv.ErrQuota) {
				// The tenant is at its own page limit: only it waits, and
				// only its queue stands still. The pool may have room for
				// others; holding them back would let one tenant's quota
				// stall everyone's queue for the step. (Requeued in arrival
				// order, r would fail its quota again ahead of its
				// tenant's later requests in pass 3; marking the tenant
				// here skips that attempt.)
				victim = r
				blockedTenant[r.tenant] = true
			} else {
				poolShort = true
			}
			s.preempt(victim)
			p.preempted = append(p.preempted, victim)
			if victim == r {
				break
			}
		}
		if !r.running || left == 0 {
			continue
		}
		s.add(&p, r, 1)
		left--
	}

	// Pass 2: sequences part-way through their prompt.
	for _, r := range s.running {
		if left == 0 {
			break
		}
		if n := len(r.tokens) - r.fed; n > 1 {
			c := min(n, left)
			s.add(&p, r, c)
			left -= c
		}
	}

	// Pass 3: start queued requests, first come first served. A request
	// that does not fit in the pool blocks those behind it that need pages
	// (no overtaking); one held back only by its own tenant's page quota
	// blocks only its tenant's. A request delivered prefilled already holds
	// every page it will use, so neither blocks it: waiting, it would keep
	// the very pages the request ahead of it waits for, and neither would
	// ever start. After a preemption for want of pool pages nothing starts
	// this step: what it would take, the preempted sequence needs back.
	if !poolShort {
		poolBlocked := false
		for i := 0; i < len(s.queue) && left > 0 && len(s.running) < s.maxRunning; {
			r := s.queue[i]
			if r.seq == nil { // not delivered prefilled by a KV transfer
				if poolBlocked || blockedTenant[r.tenant] {
					i++
					continue
				}
				seq, hit, err := s.alloc(r)
				if errors.Is(err, kv.ErrQuota) {
					blockedTenant[r.tenant] = true
					i++
					continue
				}
				if err != nil {
					poolBlocked = true
					p.poolWaits++
					i++
					continue
				}
				r.seq, r.fed = seq, hit
				if r.generated() == 0 {
					r.cached = hit
				}
			}
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			r.running = true
			if r.logits == nil {
				r.logits = make([]float32, s.vocab)
			}
			s.running = insertByID(s.running, r)
			p.started = append(p.started, r)
			c := min(len(r.tokens)-r.fed, left)
			s.add(&p, r, c)
			left -= c
		}
	}
	return p
}

// alloc reserves pages for r's tokens, attaching the longest cached prefix
// of its own namespace. When the pool is short it evicts cached blocks
// (from the namespace holding the most; see prefix.Cache.Reclaim) before
// giving up. It returns how many leading tokens are already computed.
func (s *scheduler) alloc(r *request) (*kv.Seq, int, error) {
	owner := kv.Owner{Tenant: r.tenant, Request: r.id}
	if s.prefix == nil {
		seq, err := s.pool.Alloc(owner, len(r.tokens))
		return seq, 0, err
	}
	for {
		// Leave the last token uncached: its logits are what the step needs.
		refs, hit := s.prefix.Lookup(s.namespace(r.tenant), r.tokens[:len(r.tokens)-1])
		seq, err := s.pool.AllocWithPrefix(owner, refs, len(r.tokens))
		if err == nil {
			if s.onLookup != nil && r.generated() == 0 && !r.looked {
				// Once: a request preempted before its first token looks
				// up again when it restarts, and is still one request.
				r.looked = true
				bs := s.prefix.BlockSize()
				s.onLookup(r.tenant, hit/bs, (len(r.tokens)-1)/bs-hit/bs)
			}
			return seq, hit, nil
		}
		if !s.reclaim(err, refs) {
			return nil, 0, err
		}
	}
}

// reclaim answers an allocation that failed for want of pages (err a
// *kv.PoolFullError) by evicting as many cached blocks as it was short,
// never those of keep (the cached prefix the allocation attaches), and
// reports whether it did. It evicts nothing unless the cache can give
// back the whole shortfall at once: a queue blocked behind pages that
// running requests hold would otherwise flush every tenant's cache, step
// after step, and still not start (prefix.Cache.Reclaimable). Evicting
// the request's own prefix would not help either: each such block adds
// a page to what it needs.
func (s *scheduler) reclaim(err error, keep []kv.PageRef) bool {
	var full *kv.PoolFullError
	if s.prefix == nil || !errors.As(err, &full) {
		return false
	}
	short := full.Need - full.Free
	if short <= 0 || s.prefix.Reclaimable(keep...) < short {
		return false
	}
	return s.prefix.Reclaim(short, keep...) == short
}

// cachePrompt offers r's freshly computed prompt blocks to its namespace's
// prefix cache. A full cache is not an error: the request goes on.
func (s *scheduler) cachePrompt(r *request) {
	if s.prefix != nil {
		s.prefix.Insert(s.namespace(r.tenant), r.tokens[:r.promptLen], r.seq)
	}
}

// add puts n of r's unfed tokens into the plan.
func (s *scheduler) add(p *stepPlan, r *request, n int) {
	ms := &r.mseq
	ms.Tokens = r.tokens[r.fed : r.fed+n]
	ms.Pos = r.fed
	ms.Cache = r.seq
	ms.Logits = nil
	if r.fed+n == len(r.tokens) {
		ms.Logits = r.logits
	}
	p.batch = append(p.batch, r)
	p.seqs = append(p.seqs, ms)
	p.tokens += n
}
