package router

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// runAdmitted admits req with the router's Admit and runs it to its end.
func runAdmitted(t *testing.T, r *Router, req engine.Request) {
	t.Helper()
	a, rej := r.Admit(req)
	if rej != nil {
		t.Fatalf("%d tokens, max_tokens %d: %v", len(req.Prompt), req.MaxTokens, rej)
	}
	st, err := r.Submit(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if _, res := drain(t, st); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestDefaultMaxTokensFitsEveryPeerThatTakesThePrompt: in a deployment
// whose decode peers differ (512 and 2048 tokens of context), a request
// without max_tokens is sized to the smallest serving peer that takes its
// prompt, so that both decodes share such requests by load; sized to the
// router's context (the largest), as before, every one went to the large
// decode. A prompt only the large decode takes is sized to it; a tenant
// with a KV quota is sized to that.
func TestDefaultMaxTokensFitsEveryPeerThatTakesThePrompt(t *testing.T) {
	f := newFake()
	small := engine.Limits{ContextLen: 512, MaxInputTokens: 400, PoolTokens: 1024}
	large := engine.Limits{ContextLen: 2048, MaxInputTokens: 2000, PoolTokens: 4096}
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		in.Limits = large
		if role == RoleDecode && i == 0 {
			in.Limits = small
		}
		if role == RoleDecode && i == 1 {
			in.TenantTokens = map[string]int{"umbrella": 300}
		}
	}
	r, _ := f.start(t, 1, 2)
	if got := r.Limits(); got != large {
		t.Fatalf("limits %+v, want the large decode's %+v", got, large)
	}
	if got := r.DefaultMaxTokens("acme", 100); got != 412 {
		t.Fatalf("a 100-token prompt without max_tokens is sized to %d; want 412, what the 512-token decode leaves", got)
	}
	tenants := []string{"acme", "globex", "initech", "hooli"}
	for _, tenant := range tenants {
		runAdmitted(t, r, engine.Request{Tenant: tenant, Prompt: make([]int, 100)})
	}
	f.mu.Lock()
	on := map[int]int{}
	for k, g := range f.generates {
		on[f.generateOn[k]]++
		if g.MaxTokens != 412 {
			f.mu.Unlock()
			t.Fatalf("reservation %d for %d tokens; want 412", k, g.MaxTokens)
		}
	}
	f.generates, f.generateOn = nil, nil
	f.mu.Unlock()
	if on[0] == 0 || on[1] == 0 {
		t.Fatalf("requests without max_tokens reserved on decodes %v; both fit them and should share them", on)
	}

	runAdmitted(t, r, engine.Request{Tenant: "acme", Prompt: make([]int, 600)}) // over the small decode's input limit
	runAdmitted(t, r, engine.Request{Tenant: "umbrella", Prompt: make([]int, 100)})
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.generates) != 2 || f.generateOn[0] != 1 || f.generates[0].MaxTokens != 2048-600 {
		t.Fatalf("a 600-token prompt reserved %+v on %v; want 1448 tokens on the large decode", f.generates, f.generateOn)
	}
	if f.generates[1].MaxTokens != 200 {
		t.Fatalf("a tenant whose quota holds 300 tokens got max_tokens %d for a 100-token prompt; want 200", f.generates[1].MaxTokens)
	}
}

// TestCrossedLimitsAreRefusedUpFront: two prefill peers whose limits
// cross (one with the long context and a small input limit, the other
// the reverse) admit together, field by field, a request neither takes.
// The router's Admit refuses it up front, and pairing with the same
// error whichever peer it looks at first: a 400 that names what the
// client can meet with its prompt, not one peer's limit that the router's
// announced limits contradict. Nothing is reserved; requests either peer
// takes run.
func TestCrossedLimitsAreRefusedUpFront(t *testing.T) {
	f := newFake()
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		switch {
		case role == RolePrefill && i == 0:
			in.Limits = engine.Limits{ContextLen: 2048, MaxInputTokens: 100, PoolTokens: 4096}
		case role == RolePrefill && i == 1:
			in.Limits = engine.Limits{ContextLen: 512, MaxInputTokens: 400, PoolTokens: 1024}
		default:
			in.Limits = engine.Limits{ContextLen: 2048, MaxInputTokens: 2048, PoolTokens: 4096}
		}
	}
	r, _ := f.start(t, 2, 1)
	req := engine.Request{Tenant: "acme", Prompt: make([]int, 300), MaxTokens: 1000}
	if _, rej := engine.Admit(req, r.Limits()); rej != nil {
		t.Fatalf("the rig's limits %+v must admit 300+1000 tokens field by field: %v", r.Limits(), rej)
	}
	check := func(what string, err error) {
		t.Helper()
		e := errkind.Of(err)
		if e.Kind != errkind.BadInput || e.Code != "context_length_exceeded" || e.Param != "messages" ||
			!strings.Contains(e.Message, "prefill servers of this deployment that accept a 300-token prompt hold at most 512 tokens in all") {
			t.Fatalf("%s: %v; want context_length_exceeded naming the 512 tokens a 300-token prompt can have in all", what, err)
		}
	}
	_, rej := r.Admit(req)
	check("Admit", rej)
	for i := 0; i < 2; i++ { // pairing rotates over the prefills; the error must not
		a, _ := engine.Admit(req, r.Limits())
		_, err := r.Submit(context.Background(), a)
		check("Submit", err)
	}
	if len(f.decodesAsked()) != 0 || len(f.prefillCalls()) != 0 {
		t.Fatalf("%d reservations and %d prefills for a request no prefill takes", len(f.decodesAsked()), len(f.prefillCalls()))
	}
	runAdmitted(t, r, engine.Request{Tenant: "acme", Prompt: make([]int, 300), MaxTokens: 200}) // prefill 1
	runAdmitted(t, r, engine.Request{Tenant: "acme", Prompt: make([]int, 50), MaxTokens: 1500}) // prefill 0
}
