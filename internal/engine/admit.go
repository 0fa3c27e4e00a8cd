package engine

import (
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// Limits are a deployment's token limits. Admission checks every request
// against them before any KV page, queue slot or transfer exists.
type Limits struct {
	// ContextLen bounds prompt plus generated tokens: the model's context,
	// or a lower configured one.
	ContextLen int
	// MaxInputTokens bounds the prompt alone; at most ContextLen.
	MaxInputTokens int
	// PoolTokens is what the KV pool can hold for one sequence: pages ×
	// page size (less anything reserved). A request that cannot fit in an
	// empty pool can never run and is rejected rather than queued forever.
	PoolTokens int
}

// Min returns the tighter of two limits, field by field: the effective
// limits of a prefill/decode pair.
func (l Limits) Min(o Limits) Limits {
	return Limits{ContextLen: min(l.ContextLen, o.ContextLen), MaxInputTokens: min(l.MaxInputTokens, o.MaxInputTokens), PoolTokens: min(l.PoolTokens, o.PoolTokens)}
}

// Request is a generation request as the engine sees it: already
// tokenized, with the tenant taken from authentication.
type Request struct {
	// Tenant is the authenticated tenant. It scopes the prefix cache and
	// quotas; it never comes from the request body.
	Tenant string
	// Prompt is the token ids to process, BOS included.
	Prompt []int
	// MaxTokens is the most tokens to generate (at least 1).
	MaxTokens int
	Sampling  sample.Params
}

// Admitted is a request that passed admission. Its fields are unexported so
// that the only way to obtain one is Admit: code that reserves pages or
// opens a transfer takes an Admitted, and so cannot be handed a request
// whose limits were never checked.
type Admitted struct {
	req Request
}

// Request returns the admitted request.
func (a Admitted) Request() Request { return a.req }

// Valid reports whether a came from Admit (the zero Admitted is not).
func (a Admitted) Valid() bool { return a.req.MaxTokens > 0 && len(a.req.Prompt) > 0 }

// Admit checks req against lim. It returns either an Admitted request or a
// rejection, never both: a rejected request cannot be turned into an
// admitted one, and nothing is ever substituted for a prompt that is too
// long.
func Admit(req Request, lim Limits) (Admitted, *errkind.Error) {
	switch {
	case len(req.Prompt) == 0:
		return Admitted{}, &errkind.Error{Kind: errkind.BadInput, Code: "invalid_prompt", Param: "prompt", Message: "the prompt is empty"}
	case req.MaxTokens < 1:
		return Admitted{}, &errkind.Error{Kind: errkind.BadInput, Code: "invalid_value", Param: "max_tokens", Message: "max_tokens must be at least 1"}
	}
	if rej := checkLimits(req, lim); rej != nil {
		if req, rej = overLimit(req, rej); rej != nil {
			return Admitted{}, rej
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		return Admitted{}, &errkind.Error{Kind: errkind.BadInput, Code: "invalid_value", Message: err.Error()}
	}
	return Admitted{req: req}, nil
}

// checkLimits is the length half of admission. It compares max_tokens
// with what the limit leaves after the prompt, so that a max_tokens near
// the largest int cannot overflow the sum into a small number that passes.
func checkLimits(req Request, lim Limits) *errkind.Error {
	n := len(req.Prompt)
	total := uint64(n) + uint64(req.MaxTokens) // both are non-negative: no overflow
	switch {
	case n > lim.MaxInputTokens:
		return tooLong("prompt has %d tokens; this deployment accepts at most %d input tokens", n, lim.MaxInputTokens)
	case req.MaxTokens > lim.ContextLen-n:
		return tooLong("prompt has %d tokens and max_tokens is %d, %d in all; this deployment's context length is %d tokens", n, req.MaxTokens, total, lim.ContextLen)
	case req.MaxTokens > lim.PoolTokens-n:
		return tooLong("prompt has %d tokens and max_tokens is %d, %d in all; the KV cache can hold at most %d tokens for one request", n, req.MaxTokens, total, lim.PoolTokens)
	}
	return nil
}

func tooLong(format string, args ...any) *errkind.Error {
	e := errkind.New(errkind.BadInput, "context_length_exceeded", format, args...)
	e.Param = "messages"
	return e
}
