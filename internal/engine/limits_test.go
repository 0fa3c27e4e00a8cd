package engine

import (
	"context"
	"math"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// A max_tokens so large that prompt + max_tokens overflows int must be
// rejected, not wrap around to a small sum that passes every limit.
func TestAdmitMaxTokensOverflow(t *testing.T) {
	lim := Limits{ContextLen: 100, MaxInputTokens: 50, PoolTokens: 80}
	for _, max := range []int{math.MaxInt, math.MaxInt - 5, math.MaxInt - 99} {
		if a, rej := Admit(Request{Prompt: make([]int, 10), MaxTokens: max}, lim); rej == nil {
			t.Errorf("10-token prompt with max_tokens %d admitted as %d tokens", max, a.Request().MaxTokens)
		} else if rej.Code != "context_length_exceeded" {
			t.Errorf("max_tokens %d: rejection %+v, want context_length_exceeded", max, rej)
		}
	}
}

// TenantTokens reports a tenant's KV page quota in tokens, and no limit
// for a tenant without one; a request of exactly that size runs.
func TestTenantTokens(t *testing.T) {
	m := stories(t)
	pc := kv.ConfigFor(&m.Config, 16, 16)
	pc.TenantPages = map[string]int{"a": 2}
	h := startEnginePool(t, m, pc, Config{BatchTokens: 32, MaxRunning: 8})
	n, ok := h.e.TenantTokens("a")
	if !ok || n != 32 {
		t.Fatalf("tenant a with 2 pages of 16: TenantTokens = %d, %v; want 32, true", n, ok)
	}
	if _, ok := h.e.TenantTokens("b"); ok {
		t.Errorf("tenant b has no quota, TenantTokens says it has one")
	}
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: n - len(prompt)}))
	if err != nil {
		t.Fatalf("a request of exactly TenantTokens refused: %v", err)
	}
	if _, res, err := collect(context.Background(), s); err != nil || res.Err != nil {
		t.Fatalf("%v %+v", err, res)
	}
}
