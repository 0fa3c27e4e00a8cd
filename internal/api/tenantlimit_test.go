package api

import (
	"context"
	"io"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// tenantLimited is the fake backend with a per-tenant token limit, refused
// at Submit as the engine refuses a request over its tenant's KV pages.
type tenantLimited struct {
	*fakeBackend
	tokens map[string]int
}

func (b tenantLimited) TenantTokens(tenant string) (int, bool) {
	n, ok := b.tokens[tenant]
	return n, ok
}

func (b tenantLimited) Submit(ctx context.Context, a engine.Admitted) (*engine.Stream, error) {
	req := a.Request()
	if n, ok := b.tokens[req.Tenant]; ok && len(req.Prompt)+req.MaxTokens > n {
		e := errkind.New(errkind.BadInput, "context_length_exceeded", "prompt has %d tokens and max_tokens is %d; this tenant may hold at most %d tokens", len(req.Prompt), req.MaxTokens, n)
		e.Param = "max_tokens"
		return nil, e
	}
	return b.fakeBackend.Submit(ctx, a)
}

// A request without max_tokens from a tenant whose KV quota is smaller
// than the context gets as many tokens as that tenant can hold, not a 400
// about a max_tokens it never sent.
func TestDefaultMaxTokensWithinTenantQuota(t *testing.T) {
	h := newHarness(t, func(o *Options, f *fakeBackend) {
		o.Backend = tenantLimited{fakeBackend: f, tokens: map[string]int{"a": 32}}
	})
	for _, key := range []string{keyA, keyB} {
		resp := post(t, h, "/v1/completions", key, `{"model":"stories260K","prompt":"x"}`)
		if resp.StatusCode != 200 {
			raw, _ := io.ReadAll(resp.Body)
			t.Fatalf("key %s: status %d %s", key, resp.StatusCode, raw)
		}
	}
	calls := h.fake.calls()
	if n := len(calls[0].Prompt) + calls[0].MaxTokens; n != 32 {
		t.Errorf("tenant a (32-token quota): prompt + default max_tokens = %d, want 32", n)
	}
	if n := len(calls[1].Prompt) + calls[1].MaxTokens; n != 64 {
		t.Errorf("tenant b (no quota): prompt + default max_tokens = %d, want the context, 64", n)
	}
}
