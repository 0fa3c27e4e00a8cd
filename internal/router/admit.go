package router

import (
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

var _ engine.Admitter = (*Router)(nil) // the HTTP layer admits through it

// Admit is the router's admission, exact where Limits is only a bound: it
// admits a request only when some serving prefill and some serving decode
// each admit it by their own announced limits, which is what pairing
// needs. Limits, the loosest serving peer's per field, admit a request
// that no single peer takes when the peers' limits cross (one with the
// longer context, another with the larger input limit); Admit refuses it
// up front with the error pairing would give (refusal), so the client
// never meets a 400 after being admitted. With no peer of a role up, the
// request is admitted against Limits and pairing answers 503.
//
// A request with MaxTokens 0 (the client sent none) is sized first
// (DefaultMaxTokens). An HTTP layer over the router admits with Admit
// instead of engine.Admit(req, Limits()).
func (r *Router) Admit(req engine.Request) (engine.Admitted, *errkind.Error) {
	if req.MaxTokens == 0 {
		req.MaxTokens = r.DefaultMaxTokens(req.Tenant, len(req.Prompt))
	}
	a, rej := engine.Admit(req, r.Limits())
	if rej != nil {
		return engine.Admitted{}, rej
	}
	for _, ps := range [][]*peer{r.prefill, r.decode} {
		var refused []int
		fits := false
		for k, p := range ps {
			if !p.isUp() {
				continue
			}
			if p.admits(req) != nil {
				refused = append(refused, k)
				continue
			}
			fits = true
			break
		}
		if !fits && len(refused) > 0 {
			return engine.Admitted{}, refusal(req, ps, refused)
		}
	}
	return a, nil
}

// DefaultMaxTokens is max_tokens for a request of tenant with a prompt of
// prompt tokens that sent none: the room the smallest serving peer that
// takes the prompt leaves after it, over both roles (and at most the
// tenant's TenantTokens less the prompt, at least 1).
//
// Sized to the largest peer's context, as serve sizes it to its own, such
// a request fitted only the largest peers, and in a deployment whose
// peers differ every one of them went there. Sized to the smallest peer
// that takes its prompt, it fits every serving peer that takes the
// prompt, so pairing spreads it by load like any other; and its length
// does not depend on which peer the load sent it to (the same request
// gives the same output on any pair). A prompt that only larger peers
// take is sized to the smallest of those. A client that wants more sends
// max_tokens, and pairing sends the request where it fits.
//
// With no serving peer of a role that takes the prompt, it is sized to
// Limits, as before, and admission refuses it for its length.
func (r *Router) DefaultMaxTokens(tenant string, prompt int) int {
	lim := r.Limits()
	room := min(lim.ContextLen, lim.PoolTokens)
	smallest, ok := 0, true
	for _, ps := range [][]*peer{r.prefill, r.decode} {
		found := false
		for _, p := range ps {
			if !p.isUp() {
				continue
			}
			if n, fits := roomFor(p.limits(), prompt); fits {
				smallest, found = minPositive(smallest, n), true
			}
		}
		ok = ok && found
	}
	if ok {
		room = min(room, smallest)
	}
	if n, has := r.TenantTokens(tenant); has {
		room = min(room, n)
	}
	return max(1, room-prompt)
}

// roomFor is the most tokens, prompt and generated, that a peer with
// limits l holds for one request, and whether it takes a prompt of n
// tokens with at least one token generated.
func roomFor(l engine.Limits, n int) (int, bool) {
	room := min(l.ContextLen, l.PoolTokens)
	return room, n <= l.MaxInputTokens && room-n >= 1
}

// minPositive is the smaller of a and b, where a of 0 means "none yet"
// (a room that takes a prompt is at least 2).
func minPositive(a, b int) int {
	if a == 0 {
		return b
	}
	return min(a, b)
}
