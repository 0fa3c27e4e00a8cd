package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// Config sizes an Engine.
type Config struct {
	Limits Limits
	// BatchTokens is the per-step token budget: one token for each decoding
	// sequence, the rest for prompt chunks. It bounds the forward pass's
	// scratch memory and how long one step can delay the others.
	BatchTokens int
	// MaxRunning bounds the sequences in one batch.
	MaxRunning int
	// MaxQueued bounds the requests waiting to start; beyond it Submit
	// answers Overload.
	MaxQueued int
	// TenantMaxRequests caps each named tenant's requests in flight
	// (queued or running); beyond it Submit answers Quota. DefaultMaxRequests
	// applies to tenants not listed; 0 means unlimited.
	TenantMaxRequests  map[string]int
	DefaultMaxRequests int
	// Prefix, when set, caches prompt blocks per namespace; Namespace maps
	// an authenticated tenant to its namespace (its own, unless the
	// operator grouped tenants explicitly). Nil Namespace means one
	// namespace per tenant.
	Prefix    *prefix.Cache
	Namespace func(tenant string) string
	// Observer, when set, hears about every step from the step loop. It
	// must be cheap and must not block: metrics, not I/O.
	Observer Observer
}

// Observer receives the engine's events for metrics.
type Observer interface {
	ObserveStep(batchTokens, running, queued int)
	Preempted(tenant string)
	OwnershipViolation()
	// PrefixLookup reports a request's prefix-cache lookup when it starts:
	// how many of its prompt's full blocks were cached.
	PrefixLookup(tenant string, hitBlocks, missBlocks int)
}

// Stats is a snapshot of the engine for metrics and tests.
type Stats struct {
	Queued, Running int
	Preemptions     uint64
	// PoolWaits counts the scheduler's passes (each wake-up of its loop,
	// not only those that ran a forward pass, unlike Steps) at which the
	// queue's first request needing pages could not get them, even after
	// the prefix cache gave back what it could: how often and how long
	// the queue stalled on the pool.
	PoolWaits     uint64
	Steps         uint64
	BatchedTokens uint64
	Violations    uint64 // ownership-tag failures seen by requests
}

// Engine serves requests on one model with one KV pool. Submit is safe for
// concurrent use; Run must be called exactly once.
type Engine struct {
	cfg    Config
	m      *model.Model
	runner *model.Runner
	pool   *kv.Pool

	submitCh chan *request
	cancelCh chan *request
	done     chan struct{}

	mu       sync.Mutex
	inflight map[string]int // per tenant, queued + running
	closed   bool

	nextID atomic.Uint64
	stats  struct {
		queued, running                         atomic.Int64
		preemptions, steps, batched, violations atomic.Uint64
		poolWaits                               atomic.Uint64
	}

	sched scheduler
	draws *draws // the step's sampling, reused
}

// New returns an engine over model m, computing on threads and storing KV
// in pool.
func New(cfg Config, m *model.Model, threads *kernels.Pool, pool *kv.Pool) (*Engine, error) {
	if cfg.BatchTokens < 1 {
		return nil, fmt.Errorf("engine: batch token budget %d must be positive", cfg.BatchTokens)
	}
	if cfg.MaxRunning < 1 {
		return nil, fmt.Errorf("engine: max running sequences %d must be positive", cfg.MaxRunning)
	}
	if cfg.MaxQueued < 1 {
		cfg.MaxQueued = 1024
	}
	e := &Engine{
		cfg: cfg, m: m, pool: pool,
		runner:   m.NewRunner(threads, cfg.BatchTokens, cfg.Limits.ContextLen),
		submitCh: make(chan *request, cfg.MaxQueued),
		cancelCh: make(chan *request, 64),
		done:     make(chan struct{}),
		inflight: make(map[string]int),
		draws:    newDraws(threads),
	}
	e.sched = scheduler{pool: pool, budget: cfg.BatchTokens, maxRunning: cfg.MaxRunning, vocab: m.Config.Vocab, prefix: cfg.Prefix, namespace: cfg.Namespace}
	if cfg.Observer != nil {
		e.sched.onLookup = cfg.Observer.PrefixLookup
	}
	if e.sched.prefix != nil && e.sched.namespace == nil {
		e.sched.namespace = func(t string) string { return prefix.Namespace(t, nil) }
	}
	return e, nil
}

// Limits implements Backend.
func (e *Engine) Limits() Limits { return e.cfg.Limits }

// Stats returns a snapshot. Safe for concurrent use.
func (e *Engine) Stats() Stats {
	return Stats{
		Queued: int(e.stats.queued.Load()), Running: int(e.stats.running.Load()),
		Preemptions: e.stats.preemptions.Load(), Steps: e.stats.steps.Load(), PoolWaits: e.stats.poolWaits.Load(),
		BatchedTokens: e.stats.batched.Load(), Violations: e.stats.violations.Load(),
	}
}

// TenantPagesFit rejects a request that needs more KV pages (prompt plus
// max_tokens) than its tenant may ever hold in pool: it could only wait
// forever. A server that allocates pages before submitting (a decode
// server reserving for a transfer) calls it first too.
func TenantPagesFit(pool *kv.Pool, req Request) *errkind.Error {
	lim, ok := pool.Config().TenantPages[req.Tenant]
	if !ok {
		return nil
	}
	_, pageSize := pool.Capacity()
	if need := (len(req.Prompt) + req.MaxTokens + pageSize - 1) / pageSize; need > lim {
		e := errkind.New(errkind.BadInput, "context_length_exceeded",
			"prompt has %d tokens and max_tokens is %d, %d in all; this API key's tenant may hold at most %d KV pages (%d tokens)",
			len(req.Prompt), req.MaxTokens, len(req.Prompt)+req.MaxTokens, lim, lim*pageSize)
		e.Param = "max_tokens"
		return e
	}
	return nil
}

// TenantTokens implements TenantLimiter: a tenant with a KV page quota
// can hold at most that many pages' tokens (see TenantPagesFit).
func (e *Engine) TenantTokens(tenant string) (int, bool) { return e.pool.TenantTokens(tenant) }

// Submit implements Backend.
func (e *Engine) Submit(ctx context.Context, a Admitted) (*Stream, error) {
	return e.submit(ctx, a, nil)
}

// Prefill runs only an admitted request's prompt: it computes the KV,
// samples the first token, and ends the stream with a Result whose Handoff
// holds a lease on that KV for the transfer to a decode server. The stream
// carries no tokens. This is the prefill role of disaggregated serving.
func (e *Engine) Prefill(ctx context.Context, a Admitted) (*Stream, error) {
	return e.submit(ctx, a, func(r *request) { r.prefillOnly = true })
}

// SubmitPrefilled starts an admitted request whose prompt KV is already in
// seq (delivered and verified by a KV transfer) and whose first token was
// sampled by the prefill server. The engine emits firstToken, then decodes
// on. seq must cover the prompt plus max_tokens and belong to the
// request's tenant; the engine takes ownership of it and frees it when the
// request ends. If the request is preempted, the engine recomputes the
// prompt locally, exactly as for any request.
func (e *Engine) SubmitPrefilled(ctx context.Context, a Admitted, seq *kv.Seq, firstToken int) (*Stream, error) {
	req := a.Request()
	if seq == nil || seq.Len() != len(req.Prompt) || seq.Cap() < len(req.Prompt)+req.MaxTokens {
		if seq != nil {
			seq.Free()
		}
		return nil, errkind.New(errkind.Integrity, "kv_incomplete", "the transferred KV does not cover the prompt")
	}
	if seq.Owner().Tenant != req.Tenant {
		// The caller allocates the sequence for the request; one of
		// another tenant's would decode this request from its KV.
		seq.Free()
		return nil, errkind.New(errkind.Integrity, "kv_foreign", "the transferred KV belongs to another tenant than the request")
	}
	// Nothing left to decode: the first token ended the text, or it was
	// the only token asked for. Answer without a step.
	if e.m.IsEnd(firstToken) || req.MaxTokens == 1 {
		seq.Free()
		st := NewStream()
		res := Result{Finish: FinishStop, Usage: Usage{PromptTokens: len(req.Prompt)}}
		if !e.m.IsEnd(firstToken) {
			st.PushWith([]int{firstToken}, unknownLogprobs(req.Sampling.Logprobs))
			res = Result{Finish: FinishLength, Usage: Usage{PromptTokens: len(req.Prompt), CompletionTokens: 1}}
		}
		st.Close(res)
		return st, nil
	}
	st, err := e.submit(ctx, a, func(r *request) {
		r.seq, r.fed = seq, len(r.tokens)
		r.sampler.Resume([]int{firstToken})
		r.tokens = append(r.tokens, firstToken)
		// Its log probabilities, if asked for, are the prefill server's
		// to give (Handoff.FirstLogprobs): unknown here.
		r.stream.PushWith([]int{firstToken}, unknownLogprobs(r.logprobs))
		r.logits = make([]float32, e.m.Config.Vocab)
	})
	if err != nil {
		seq.Free() // refused before the engine took it (Free is idempotent)
	}
	return st, err
}

// unknownLogprobs is the log probabilities a decode server gives the
// first token, which its prefill server drew: one unknown entry when the
// request asked for them, none when it did not.
func unknownLogprobs(asked bool) []*sample.Logprobs {
	if !asked {
		return nil
	}
	return []*sample.Logprobs{nil}
}

func (e *Engine) submit(ctx context.Context, a Admitted, setup func(*request)) (*Stream, error) {
	if !a.Valid() {
		return nil, errkind.New(errkind.Internal, "not_admitted", "request was not admitted")
	}
	req := a.Request()
	if rej := TenantPagesFit(e.pool, req); rej != nil {
		return nil, rej
	}
	if ctx.Err() != nil {
		// The caller is gone already: queueing the request would only
		// spend steps on text nobody reads until the cancellation caught
		// up with it.
		return nil, errCancelled
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errkind.New(errkind.Overload, "shutting_down", "the server is shutting down")
	}
	limit, ok := e.cfg.TenantMaxRequests[req.Tenant]
	if !ok {
		limit = e.cfg.DefaultMaxRequests
	}
	if n := e.inflight[req.Tenant]; limit > 0 && n >= limit {
		e.mu.Unlock()
		return nil, errkind.New(errkind.Quota, "rate_limit_exceeded", "this API key's tenant has %d requests in flight, its limit is %d", n, limit)
	}
	e.inflight[req.Tenant]++

	r := &request{
		id: e.nextID.Add(1), tenant: req.Tenant, tokens: append([]int(nil), req.Prompt...),
		promptLen: len(req.Prompt), maxTokens: req.MaxTokens, sampler: sample.New(req.Sampling), logprobs: req.Sampling.Logprobs,
		stream: NewStream(),
	}
	if setup != nil {
		setup(r)
	}
	// A cancelled context becomes a cancel event for the step loop; the
	// loop, not this goroutine, frees the request's pages. The hook is in
	// place before the request is handed over, so the loop never sees a
	// request whose hook is still being set: that includes the hook's own
	// hand-over, which for a context cancelled already may start on its
	// goroutine before AfterFunc has returned, so it waits for hooked. A
	// cancel that overtakes the submission is handled by the loop skipping
	// finished requests.
	e.stats.queued.Add(1)
	hooked := make(chan struct{})
	r.stopWatch = context.AfterFunc(ctx, func() {
		<-hooked
		select {
		case e.cancelCh <- r:
		case <-e.done:
		}
	})
	close(hooked)
	// The hand-over happens under mu, as the closed check did: shutdown
	// sets closed under mu and then drains submitCh, so a request is
	// either refused or drained and failed, never left in the channel
	// after the loop is gone with a stream that never ends.
	select {
	case e.submitCh <- r:
		e.mu.Unlock()
		return r.stream, nil
	default:
	}
	e.mu.Unlock()
	if !r.stopWatch() {
		return r.stream, nil // already cancelled: the loop ends the stream
	}
	e.stats.queued.Add(-1)
	e.release(r.tenant)
	if r.seq != nil {
		r.seq.Free()
	}
	return nil, errkind.New(errkind.Overload, "server_overloaded", "the server's queue is full (%d requests waiting)", e.cfg.MaxQueued)
}

func (e *Engine) release(tenant string) {
	e.mu.Lock()
	if e.inflight[tenant]--; e.inflight[tenant] <= 0 {
		delete(e.inflight, tenant)
	}
	e.mu.Unlock()
}

// Bounds of the step loop's wait when nothing can run (see Run). Variables
// so a test can make the safety net too long to matter.
var (
	minStallWait = 50 * time.Microsecond
	maxStallWait = 5 * time.Millisecond
)

// Run is the step loop. It returns when ctx is cancelled, after failing
// every request still queued or running and freeing their pages.
func (e *Engine) Run(ctx context.Context) error {
	defer e.shutdown()
	// This goroutine runs a share of every forward pass; see forward.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var stall time.Duration
	for {
		if e.sched.idle() {
			select {
			case r := <-e.submitCh:
				e.enqueue(r)
			case r := <-e.cancelCh:
				e.finish(r, Result{Err: errCancelled})
				e.observe(0)
			case <-ctx.Done():
				return nil
			}
		}
		e.absorb()
		if ctx.Err() != nil {
			return nil
		}
		if e.step() {
			stall = 0
			continue
		}
		// Nothing could run: every queued request waits for pages held
		// outside the engine (a decode server's reservation, a lease on
		// KV still in transfer). Sleep until the pool frees pages, or a
		// submission, a cancellation or shutdown arrives; the wait's
		// bound, backing off to maxStallWait, is only a safety net for a
		// change that frees nothing.
		stall = min(max(2*stall, minStallWait), maxStallWait)
		e.stalled(ctx, stall)
	}
}

// stalled waits up to d for freed pages, a submission, a cancellation or
// ctx's end.
func (e *Engine) stalled(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.pool.Freed():
	case r := <-e.submitCh:
		e.enqueue(r)
	case r := <-e.cancelCh:
		e.finish(r, Result{Err: errCancelled})
	case <-ctx.Done():
	case <-t.C:
	}
}

// absorb takes every pending submission and cancellation without blocking.
func (e *Engine) absorb() {
	for {
		select {
		case r := <-e.submitCh:
			e.enqueue(r)
		case r := <-e.cancelCh:
			e.finish(r, Result{Err: errCancelled})
		default:
			return
		}
	}
}

// enqueue queues a submitted request, unless a cancel overtook it.
func (e *Engine) enqueue(r *request) {
	if !r.finished {
		e.sched.enqueue(r)
	}
}

var (
	errCancelled = errkind.New(errkind.Unavailable, "request_cancelled", "the request was cancelled")
	errShutdown  = errkind.New(errkind.Overload, "shutting_down", "the server shut down before the request finished")
)

func (e *Engine) shutdown() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	close(e.done)
	for {
		select {
		case r := <-e.submitCh:
			e.enqueue(r)
			continue
		default:
		}
		break
	}
	for _, r := range e.sched.all() {
		e.finish(r, Result{Err: errShutdown})
	}
}

// handoff ends a prefill-only request: its KV goes out under a lease, and
// its own hold on the pages is dropped, so the pages return to the pool
// exactly when the lease is released.
func (e *Engine) handoff(r *request, first int, firstLogprobs *sample.Logprobs) {
	lease, err := r.seq.Lease()
	if err != nil {
		e.finish(r, Result{Err: errkind.Wrap(errkind.Integrity, "kv_integrity_error", err, "could not pin the prompt's KV for transfer")})
		return
	}
	e.finish(r, Result{Finish: FinishLength, Handoff: &Handoff{Lease: lease, Tokens: lease.Tokens(), FirstToken: first, FirstLogprobs: firstLogprobs, End: e.m.IsEnd(first)}})
}

// observe reports the step (or an idle moment, with 0 tokens) so that the
// gauges reflect requests that finished since.
func (e *Engine) observe(tokens int) {
	if o := e.cfg.Observer; o != nil {
		o.ObserveStep(tokens, int(e.stats.running.Load()), int(e.stats.queued.Load()))
	}
}

// finish ends r with res: frees its pages, closes its stream and releases
// its tenant's slot. Finishing twice is a no-op.
func (e *Engine) finish(r *request, res Result) {
	if r.finished {
		return
	}
	r.finished = true
	if r.stopWatch != nil {
		r.stopWatch()
	}
	if res.Err == nil {
		res = e.trusted(res)
	}
	wasRunning := r.running
	e.sched.remove(r)
	if wasRunning {
		e.stats.running.Add(-1)
	} else {
		e.stats.queued.Add(-1)
	}
	res.Usage = Usage{PromptTokens: r.promptLen, CompletionTokens: r.generated(), CachedTokens: r.cached}
	// The tenant's slot first: a client that sends its next request the
	// moment this one ends must not find it still counted.
	e.release(r.tenant)
	r.stream.Close(res)
}

// trusted is res, a request's success, unless the model's file was
// written in place under the server (model.Model.CheckFile): the weights
// are mapped from it, so the answer may come from other weights than the
// model's, and it becomes a failure. The server stops on the same check
// within seconds; this closes that window for each answer, at one fstat
// per request. A prefill's KV lease is released with it.
func (e *Engine) trusted(res Result) Result {
	err := e.m.CheckFile()
	if err == nil {
		return res
	}
	if res.Handoff != nil {
		_ = res.Handoff.Lease.Release()
	}
	return Result{Err: errModelFile(err)}
}

// CodeModelFileModified is the code of a request failed because the
// model file was written under the server (its answer cannot be trusted).
const CodeModelFileModified = "model_file_modified"

func errModelFile(err error) *errkind.Error {
	return errkind.Wrap(errkind.Integrity, CodeModelFileModified, err, "the model file changed under the server, so this answer cannot be trusted")
}

// forward runs the batch, turning a memory fault in the model file's
// mapping (the file cut short under the server) into an error wrapping
// model.ErrFileModified, where it would otherwise kill the process with
// SIGBUS and every tenant's requests with it. The pool's workers and Run's
// goroutine panic on faults instead of crashing; a fault anywhere else is
// a bug and panics on.
func (e *Engine) forward(seqs []*model.Seq) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if err = e.m.Fault(r); err == nil {
				panic(r)
			}
		}
	}()
	return e.runner.Forward(seqs)
}

// step runs one batch: plan, forward, sample, emit. It reports whether
// anything changed: a request started, was preempted or computed tokens.
func (e *Engine) step() bool {
	plan := e.sched.plan()
	e.stats.queued.Add(int64(len(plan.preempted) - len(plan.started)))
	e.stats.running.Add(int64(len(plan.started) - len(plan.preempted)))
	e.stats.preemptions.Add(uint64(len(plan.preempted)))
	e.stats.poolWaits.Add(uint64(plan.poolWaits))
	if o := e.cfg.Observer; o != nil {
		for _, r := range plan.preempted {
			o.Preempted(r.tenant)
		}
	}
	defer e.observe(plan.tokens)
	if len(plan.batch) == 0 {
		return len(plan.preempted) > 0
	}
	if err := e.forward(plan.seqs); err != nil {
		// A malformed batch is a bug; fail its requests rather than loop.
		fail := errkind.Wrap(errkind.Internal, "internal_error", err, "forward pass failed")
		if errors.Is(err, model.ErrFileModified) {
			fail = errModelFile(err)
		}
		for _, r := range plan.batch {
			e.finish(r, Result{Err: fail})
		}
		return true
	}
	e.stats.steps.Add(1)
	e.stats.batched.Add(uint64(plan.tokens))
	d := e.draws
	d.reset()
	for i, r := range plan.batch {
		s := plan.seqs[i]
		if s.Err != nil {
			if errors.Is(s.Err, kv.ErrOwnership) {
				e.stats.violations.Add(1)
				if o := e.cfg.Observer; o != nil {
					o.OwnershipViolation()
				}
				e.finish(r, Result{Err: errkind.Wrap(errkind.Integrity, "kv_integrity_error", s.Err, "KV cache integrity check failed; the request was stopped")})
			} else {
				e.finish(r, Result{Err: errkind.Wrap(errkind.Internal, "internal_error", s.Err, "KV cache error")})
			}
			continue
		}
		r.fed += len(s.Tokens)
		if s.Logits == nil {
			continue // a prompt chunk that does not end the prompt
		}
		if r.generated() == 0 {
			e.sched.cachePrompt(r)
		}
		d.add(r, s.Logits)
	}
	d.run()
	for i, r := range d.reqs {
		tok := d.toks[i]
		if r.prefillOnly {
			e.handoff(r, tok, d.lps[i])
			continue
		}
		if e.m.IsEnd(tok) {
			e.finish(r, Result{Finish: FinishStop})
			continue
		}
		r.tokens = append(r.tokens, tok)
		if r.logprobs {
			r.stream.PushWith([]int{tok}, d.lps[i:i+1:i+1])
		} else {
			r.stream.Push(tok)
		}
		if r.generated() >= r.maxTokens {
			e.finish(r, Result{Finish: FinishLength})
		}
	}
	return true
}
