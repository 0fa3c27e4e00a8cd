package engine

import (
	"context"
	"sync"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// FinishReason says why a successful generation ended.
type FinishReason string

const (
	// FinishStop: an end-of-text token or a stop sequence.
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens reached.
	FinishLength FinishReason = "length"
)

// Usage counts a request's tokens honestly: PromptTokens is the length of
// the prompt the engine processed (BOS included), CachedTokens how many of
// them came from the tenant's prefix cache.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
}

// Result ends a stream. Exactly one of Finish and Err is set: a failure is
// never dressed up as a finish reason.
type Result struct {
	Finish FinishReason
	Err    *errkind.Error
	Usage  Usage
	// Handoff carries a prefill-only request's KV to whoever transfers it
	// (see Engine.Prefill); nil otherwise.
	Handoff *Handoff
}

// Handoff is the product of a prefill-only request: a lease pinning the
// KV of its prompt, and the first token sampled after it. The receiver
// must Release the lease once the KV is delivered (or the transfer
// failed); until then the pages cannot be freed or reused.
type Handoff struct {
	Lease      *kv.Lease
	Tokens     int // prompt tokens the lease covers
	FirstToken int
	// FirstLogprobs is the first token's log probabilities, when the
	// request asked for them: the decode server that emits the token
	// cannot compute them (the prompt's last logits stay here).
	FirstLogprobs *sample.Logprobs
	// End is true when the first token ends the text (EOS): there is
	// nothing for a decode server to do.
	End bool
}

// Stream carries one request's generated tokens from a Backend to its
// consumer. The producer never blocks on the consumer: tokens queue inside
// the stream (at most max_tokens of them), so a slow reader cannot stall a
// batch that other tenants share.
//
// Consumer methods (Next) and producer methods (Push, Close) are safe for
// concurrent use with each other.
type Stream struct {
	mu     sync.Mutex
	queued []int
	// lps is queued's log probabilities, entry for entry, once any token
	// came with them (PushWith); nil entries for tokens without.
	lps    []*sample.Logprobs
	result *Result
	wake   chan struct{} // capacity 1: "something changed"
}

// NewStream returns an open stream. Backends create streams; consumers get
// them from Submit.
func NewStream() *Stream { return &Stream{wake: make(chan struct{}, 1)} }

// Push appends generated tokens. Push after Close is ignored.
func (s *Stream) Push(tokens ...int) { s.PushWith(tokens, nil) }

// PushWith appends generated tokens with their log probabilities, for a
// request that asked for them: lps[i] is tokens[i]'s, nil where it is not
// known here (a decode server does not know the first token's: its
// prefill server drew it). lps may be nil. PushWith after Close is
// ignored.
func (s *Stream) PushWith(tokens []int, lps []*sample.Logprobs) {
	s.mu.Lock()
	if s.result == nil {
		if lps != nil && s.lps == nil {
			s.lps = make([]*sample.Logprobs, len(s.queued), len(s.queued)+len(tokens))
		}
		s.queued = append(s.queued, tokens...)
		if s.lps != nil {
			for i := range tokens {
				var lp *sample.Logprobs
				if i < len(lps) {
					lp = lps[i]
				}
				s.lps = append(s.lps, lp)
			}
		}
	}
	s.mu.Unlock()
	s.signal()
}

// Close ends the stream with r. Only the first Close counts.
func (s *Stream) Close(r Result) {
	s.mu.Lock()
	if s.result == nil {
		s.result = &r
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next blocks until tokens are available or the stream ends. It returns
// the tokens produced since the last call (possibly none) and, once every
// token has been returned, the final Result. ctx bounds the wait only; it
// does not cancel the request (cancel the context given to Submit for
// that).
func (s *Stream) Next(ctx context.Context) ([]int, *Result, error) {
	toks, _, res, err := s.NextWith(ctx)
	return toks, res, err
}

// NextWith is Next with the tokens' log probabilities, entry for entry
// (nil entries where a token came without; a nil slice when none did).
func (s *Stream) NextWith(ctx context.Context) ([]int, []*sample.Logprobs, *Result, error) {
	for {
		s.mu.Lock()
		toks, lps := s.queued, s.lps
		s.queued = nil
		if lps != nil {
			s.lps = []*sample.Logprobs{} // still non-nil: later tokens keep their entries
		}
		res := s.result
		s.mu.Unlock()
		if len(toks) > 0 || res != nil {
			return toks, lps, res, nil
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		}
	}
}

// Backend runs admitted requests: the in-process engine, or (in
// disaggregated mode) the router that drives a prefill and a decode peer.
// The HTTP layer depends only on this interface.
type Backend interface {
	// Limits are the limits requests must be admitted against.
	Limits() Limits
	// Submit starts an admitted request. Cancelling ctx cancels the
	// request and frees everything it holds; the stream then ends with a
	// Result whose Err says so. An error here means the request never
	// started (quota, overload, shutdown) and holds nothing.
	Submit(ctx context.Context, a Admitted) (*Stream, error)
}

// Admitter is implemented by a Backend whose admission is more than Admit
// against its Limits: a router, whose peers' limits can cross, so that a
// request within the loosest of each field fits no single pair. The HTTP
// layer admits through it when the Backend has one. A request with
// MaxTokens 0 (the client sent none) is sized by the Admitter.
type Admitter interface {
	Admit(req Request) (Admitted, *errkind.Error)
}

// TenantLimiter is implemented by a Backend whose tenants can have tighter
// limits than Limits (a KV page quota). The HTTP layer sizes the default
// max_tokens of a request that sends none with it, so that such a request
// gets what its tenant can hold rather than a rejection.
type TenantLimiter interface {
	// TenantTokens is the most tokens, prompt plus generated, that one
	// request of tenant can ever hold; ok is false when the tenant has no
	// limit of its own.
	TenantTokens(tenant string) (tokens int, ok bool)
}
