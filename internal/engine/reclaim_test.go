package engine

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
)

// reclaimRig is an engine over a pool of 16 pages of 8 tokens with a
// prefix cache, and the means to fill the cache, hold pages outside the
// engine, and watch a request wait.
type reclaimRig struct {
	t     *testing.T
	h     *harness
	cache *prefix.Cache
}

const rigPages, rigPageSize = 16, 8

func newReclaimRig(t *testing.T) *reclaimRig {
	m := stories(t)
	rig := &reclaimRig{t: t}
	rig.h = startEngine(t, m, rigPages, rigPageSize, Config{BatchTokens: 64, MaxRunning: 4}, func(pool *kv.Pool, c *Config) {
		var err error
		if rig.cache, err = prefix.New(pool, prefix.Config{MaxBlocks: 8}); err != nil {
			t.Fatal(err)
		}
		c.Prefix = rig.cache
	})
	return rig
}

// prompt is BOS and the start of text repeated, cut to n tokens.
func (rig *reclaimRig) prompt(text string, n int) []int {
	tok := stories(rig.t).Tokenizer
	p := tok.Encode("", true)
	for len(p) < n {
		p = append(p, tok.Encode(text, false)...)
	}
	return p[:n]
}

// submit starts a request of one token for tenant.
func (rig *reclaimRig) submit(tenant string, prompt []int) *Stream {
	rig.t.Helper()
	s, err := rig.h.e.Submit(context.Background(), admit(rig.t, rig.h.e, Request{Tenant: tenant, Prompt: prompt, MaxTokens: 1}))
	if err != nil {
		rig.t.Fatal(err)
	}
	return s
}

// finish waits for s to end well and returns how many of its prompt
// tokens came from the prefix cache.
func (rig *reclaimRig) finish(s *Stream) (cached int) {
	rig.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, res, err := collect(ctx, s)
	if err != nil || res.Err != nil {
		rig.t.Fatalf("request: %v %+v", err, res)
	}
	return res.Usage.CachedTokens
}

// blocked submits prompt for tenant and returns its stream once the
// scheduler has failed to find it pages at least twice.
func (rig *reclaimRig) blocked(tenant string, prompt []int) *Stream {
	rig.t.Helper()
	before := rig.h.e.Stats().PoolWaits
	s := rig.submit(tenant, prompt)
	for deadline := time.Now().Add(10 * time.Second); rig.h.e.Stats().PoolWaits < before+2; {
		if time.Now().After(deadline) {
			rig.t.Fatalf("the request never waited for pages: %+v", rig.h.e.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	return s
}

// hold allocates pages outside the engine (another request's, a
// transfer's) until the pool has free pages left.
func (rig *reclaimRig) hold(free int) *kv.Seq {
	rig.t.Helper()
	held, err := rig.h.pool.Alloc(kv.Owner{Tenant: "x", Request: 1 << 60}, (rig.h.pool.Stats().Free-free)*rigPageSize)
	if err != nil {
		rig.t.Fatal(err)
	}
	return held
}

// A request that cannot start until pages held elsewhere come back must
// not flush other tenants' prefix caches while it waits: their blocks
// would give back too few pages to start it, and they are the other
// tenants' time to first token. It used to evict every cached block,
// tenant b's included, on its first attempt. Once the held pages return,
// it runs, and b's blocks are still there to hit.
func TestBlockedRequestKeepsOthersCache(t *testing.T) {
	rig := newReclaimRig(t)
	bPrompt := rig.prompt(" Lily liked the sun.", 2*rigPageSize+1)
	rig.finish(rig.submit("b", bPrompt))
	want := rig.cache.Stats().Blocks
	if want["tenant:b"] != 2 {
		t.Fatalf("tenant b cached %v; the test needs 2 blocks", want)
	}
	held := rig.hold(2)
	// Five pages: one more than free and cached together.
	s := rig.blocked("a", rig.prompt(" Tom had a ball.", 4*rigPageSize+1))
	if got := rig.cache.Stats().Blocks; got["tenant:b"] != 2 {
		t.Fatalf("while a's request waited for pages, the cache went from %v to %v", want, got)
	}
	held.Free()
	rig.finish(s)
	if cached := rig.finish(rig.submit("b", bPrompt)); cached != 2*rigPageSize {
		t.Errorf("b's prompt again took %d tokens from the cache; want its %d", cached, 2*rigPageSize)
	}
}

// The blocks a waiting request's own prompt hits are not counted as
// reclaimable for it: each one evicted would add a page to what it needs.
// Here a caches 3 blocks and c 2, one page is free, and a's 7-page prompt
// extends its cached prefix: it needs 4 new pages, and c's 2 cannot make
// up the 3 missing. Counting a's own blocks, the scheduler used to evict
// them and c's, every cache emptied, and still not start it.
func TestOwnPrefixIsNotReclaimedForItself(t *testing.T) {
	rig := newReclaimRig(t)
	aPrompt := rig.prompt(" Tom had a big red ball and a dog.", 7*rigPageSize)
	rig.finish(rig.submit("a", aPrompt[:3*rigPageSize+1]))
	rig.finish(rig.submit("c", rig.prompt(" Lily liked the sun.", 2*rigPageSize+1)))
	want := rig.cache.Stats().Blocks
	if want["tenant:a"] != 3 || want["tenant:c"] != 2 {
		t.Fatalf("cached %v; the test needs a:3 and c:2", want)
	}
	held := rig.hold(1)
	s := rig.blocked("a", aPrompt)
	if got := rig.cache.Stats().Blocks; got["tenant:a"] != 3 || got["tenant:c"] != 2 {
		t.Fatalf("while a's request waited for pages, the cache went from %v to %v", want, got)
	}
	held.Free()
	if cached := rig.finish(s); cached != 3*rigPageSize {
		t.Errorf("a's long prompt took %d tokens from the cache; want its %d", cached, 3*rigPageSize)
	}
}
