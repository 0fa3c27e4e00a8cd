package engine

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
)

// A request that cannot start until pages held elsewhere come back must
// not flush other tenants' prefix caches while it waits: their blocks
// would give back too few pages to start it, and they are the other
// tenants' time to first token. It used to evict every cached block,
// tenant b's included, on its first attempt. Once the held pages return,
// it runs, and b's blocks are still there to hit.
func TestBlockedRequestKeepsOthersCache(t *testing.T) {
	m := stories(t)
	const pages, pageSize = 12, 8
	var cache *prefix.Cache
	h := startEngine(t, m, pages, pageSize, Config{BatchTokens: 64, MaxRunning: 4}, func(pool *kv.Pool, c *Config) {
		var err error
		if cache, err = prefix.New(pool, prefix.Config{MaxBlocks: 8}); err != nil {
			t.Fatal(err)
		}
		c.Prefix = cache
	})
	run := func(tenant, text string, maxTokens int) {
		t.Helper()
		a := admit(t, h.e, Request{Tenant: tenant, Prompt: m.Tokenizer.Encode(text, true), MaxTokens: maxTokens})
		s, err := h.e.Submit(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, res, err := collect(ctx, s); err != nil || res.Err != nil {
			t.Fatalf("tenant %s: %v %+v", tenant, err, res)
		}
	}
	bText := "Once upon a time, there was a little girl named Lily. She liked the sun."
	run("b", bText, 1)
	cached := func() int {
		n := 0
		for _, k := range cache.Stats().Blocks {
			n += k
		}
		return n
	}
	bBlocks := cached()
	if bBlocks < 2 {
		t.Fatalf("tenant b cached %d blocks; the test needs at least 2", bBlocks)
	}

	// Pages held outside the engine (another request's, a transfer's):
	// what is left free plus b's blocks is less than a's request needs.
	held, err := h.pool.Alloc(kv.Owner{Tenant: "x", Request: 1 << 60}, (pages-bBlocks-2)*pageSize)
	if err != nil {
		t.Fatal(err)
	}
	// A prompt of bBlocks+3 pages: one more than free and cached together.
	var aPrompt []int
	for len(aPrompt) <= (bBlocks+2)*pageSize {
		aPrompt = append(aPrompt, m.Tokenizer.Encode(" Tom had a big red ball.", false)...)
	}
	aPrompt = append(m.Tokenizer.Encode("", true), aPrompt[:(bBlocks+2)*pageSize]...)
	a := admit(t, h.e, Request{Tenant: "a", Prompt: aPrompt, MaxTokens: 4})
	s, err := h.e.Submit(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); h.e.Stats().Queued == 0 || h.e.Stats().Steps == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("a's request was never planned: %+v", h.e.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // further attempts, if the engine makes any
	if got := cached(); got != bBlocks {
		t.Fatalf("while a's request waited for pages, the cache went from %d blocks to %d", bBlocks, got)
	}

	held.Free()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, res, err := collect(ctx, s); err != nil || res.Err != nil {
		t.Fatalf("a's request after the pages came back: %v %+v", err, res)
	}
	before := cache.Stats()
	run("b", bText, 1)
	if after := cache.Stats(); after.Hits <= before.Hits {
		t.Errorf("b's prompt again: hits %d → %d; want its cached blocks hit", before.Hits, after.Hits)
	}
}
