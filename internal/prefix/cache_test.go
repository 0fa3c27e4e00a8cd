package prefix

import (
	"errors"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

const bs = 4

func newPool(t *testing.T, pages int) *kv.Pool {
	t.Helper()
	p, err := kv.NewPool(kv.PoolConfig{Pages: pages, PageSize: bs, Layers: 2, KVDim: 2})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// prefill allocates a sequence for tokens and writes a value for every
// position that depends on (tag, token prefix), as a forward pass would.
func prefill(t testing.TB, p *kv.Pool, owner kv.Owner, tokens []int, tag string) *kv.Seq {
	t.Helper()
	s, err := p.Alloc(owner, len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	k := make([]float32, 2*len(tokens))
	for pos := range tokens {
		k[2*pos], k[2*pos+1] = content(tag, tokens[:pos+1])
	}
	for l := range 2 {
		if err := s.WriteTokens(l, 0, len(tokens), k, k); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func content(tag string, prefix []int) (float32, float32) {
	h := BlockKey(tag, Key{}, prefix)
	return float32(uint32(h[0])<<12 | uint32(h[1])<<4 | uint32(h[2]&15)), float32(uint32(h[3])<<12 | uint32(h[4])<<4 | uint32(h[5]&15))
}

func seqOf(n, base int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = base + i
	}
	return s
}

func TestSameNamespaceHitsOtherMisses(t *testing.T) {
	p := newPool(t, 16)
	c, _ := New(p, Config{})
	tokens := seqOf(10, 100) // two full blocks and a partial one
	a := prefill(t, p, kv.Owner{Tenant: "alice", Request: 1}, tokens, "alice")
	nsA, nsB := Namespace("alice", nil), Namespace("bob", nil)
	if n, err := c.Insert(nsA, tokens, a); err != nil || n != 2 {
		t.Fatalf("Insert: %d blocks, %v; want the 2 full blocks", n, err)
	}
	hits, matched := c.Lookup(nsA, tokens)
	if matched != 8 || len(hits) != 2 {
		t.Fatalf("same namespace: matched %d tokens in %d blocks, want 8 in 2", matched, len(hits))
	}
	if hits, matched := c.Lookup(nsB, tokens); matched != 0 || hits != nil {
		t.Fatalf("other namespace: matched %d tokens, want a miss", matched)
	}
	if _, matched := c.Lookup("", tokens); matched != 0 {
		t.Fatal("the empty namespace hit")
	}
	if st := c.Stats(); st.Hits != 1 || st.Misses != 1 || st.Blocks[nsA] != 2 || len(st.Blocks) != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The hit attaches and reads back alice's KV; a differing third token
	// block still matches only the shared part.
	b, err := p.AllocWithPrefix(kv.Owner{Tenant: "alice", Request: 2}, hits, 12)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 16)
	if err := b.ReadTokens(1, 0, 8, buf, buf); err != nil {
		t.Fatal(err)
	}
	for pos := range 8 {
		if k0, k1 := content("alice", tokens[:pos+1]); buf[2*pos] != k0 || buf[2*pos+1] != k1 {
			t.Fatalf("attached position %d reads %v, want alice's KV", pos, buf[2*pos:2*pos+2])
		}
	}
	other := append(seqOf(4, 100), 7, 7, 7, 7)
	if _, matched := c.Lookup(nsA, other); matched != 4 {
		t.Fatalf("diverging second block: matched %d, want 4", matched)
	}
	if p.Stats().Violations != 0 {
		t.Fatal("ownership violations")
	}
}

func TestGroupNamespaceSharesExplicitly(t *testing.T) {
	groups := map[string]string{"alice": "acme", "carol": "acme"}
	if Namespace("alice", groups) != Namespace("carol", groups) {
		t.Fatal("grouped tenants get different namespaces")
	}
	if Namespace("bob", groups) == Namespace("alice", groups) || Namespace("acme", nil) == Namespace("alice", groups) {
		t.Fatal("an ungrouped tenant shares a grouped namespace")
	}
	if Namespace("", groups) != "" {
		t.Fatal("the empty tenant got a namespace")
	}
}

func TestKeysSeparateFields(t *testing.T) {
	var zero, other Key
	other[0] = 1
	keys := map[Key]string{}
	for name, k := range map[string]Key{
		"base":       BlockKey("a", zero, []int{1, 2}),
		"ns":         BlockKey("b", zero, []int{1, 2}),
		"ns-longer":  BlockKey("a\x00", zero, []int{1, 2}),
		"parent":     BlockKey("a", other, []int{1, 2}),
		"order":      BlockKey("a", zero, []int{2, 1}),
		"length":     BlockKey("a", zero, []int{1, 2, 0}),
		"empty":      BlockKey("", zero, nil),
		"negative":   BlockKey("a", zero, []int{-1, 2}),
		"big-tokens": BlockKey("a", zero, []int{1 << 40, 2}),
	} {
		if prev, dup := keys[k]; dup {
			t.Fatalf("%s and %s hash alike", name, prev)
		}
		keys[k] = name
	}
}

func TestEvictionReturnsPagesToPool(t *testing.T) {
	p := newPool(t, 8)
	c, _ := New(p, Config{})
	tokens := seqOf(12, 0)
	s := prefill(t, p, kv.Owner{Tenant: "t", Request: 1}, tokens, "t")
	ns := Namespace("t", nil)
	if n, _ := c.Insert(ns, tokens, s); n != 2 {
		// The default quota is a quarter of 8 pages.
		t.Fatalf("inserted %d blocks, want 2 (default quota)", n)
	}
	s.Free()
	if st := p.Stats(); st.Shared != 2 || st.Free != 6 {
		t.Fatalf("after freeing the sequence: %+v, want the 2 cached pages held", st)
	}
	if n := c.Evict(ns, 1); n != 1 {
		t.Fatalf("evicted %d", n)
	}
	if _, matched := c.Lookup(ns, tokens); matched != 4 {
		t.Fatalf("after evicting one block, matched %d; want the first block (leaves go first)", matched)
	}
	c.Clear()
	if st := p.Stats(); st.Free != 8 {
		t.Fatalf("after Clear: %+v, want every page free", st)
	}
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
	if c.Stats().ReleaseErrors != 0 {
		t.Fatal("release errors")
	}
}

func TestLRUAndQuota(t *testing.T) {
	p := newPool(t, 32)
	c, _ := New(p, Config{MaxBlocks: 3, NamespaceBlocks: map[string]int{"off": 0}})
	ns := "tenant:t"
	var seqs [][]int
	for i := range 4 {
		tokens := seqOf(bs, 10*i)
		seqs = append(seqs, tokens)
		s := prefill(t, p, kv.Owner{Tenant: "t", Request: uint64(i)}, tokens, "t")
		if i == 3 {
			// Touch block 0 so block 1 is now the least recently used.
			if _, m := c.Lookup(ns, seqs[0]); m != bs {
				t.Fatal("block 0 missing")
			}
		}
		if n, err := c.Insert(ns, tokens, s); n != 1 || err != nil {
			t.Fatalf("insert %d: %d, %v", i, n, err)
		}
		s.Free()
	}
	for i, want := range []int{bs, 0, bs, bs} {
		if _, m := c.Lookup(ns, seqs[i]); m != want {
			t.Fatalf("block %d: matched %d, want %d", i, m, want)
		}
	}
	if st := c.Stats(); st.Blocks[ns] != 3 || st.Evicted != 1 {
		t.Fatalf("stats %+v, want 3 blocks and 1 eviction", st)
	}
	// A chain longer than the quota keeps only its first blocks.
	long := seqOf(6*bs, 500)
	s := prefill(t, p, kv.Owner{Tenant: "u", Request: 9}, long, "u")
	if n, _ := c.Insert("tenant:u", long, s); n != 3 {
		t.Fatalf("long chain: inserted %d, want the quota of 3", n)
	}
	if n, _ := c.Insert("off", long, s); n != 0 {
		t.Fatalf("namespace with quota 0 cached %d blocks", n)
	}
	if _, err := c.Insert("", long, s); !errors.Is(err, ErrNamespace) {
		t.Fatalf("insert without namespace: %v", err)
	}
}

// TestReclaimTakesFromTheLargestNamespace: tenant a caches one block and
// goes quiet; tenant b then caches four. When the pool runs short, b's own
// blocks go, least recently used first, though a's block is the oldest:
// under a global LRU, b's burst would have flushed a's cache. Between
// namespaces holding as many blocks, the older leaf goes first.
func TestReclaimTakesFromTheLargestNamespace(t *testing.T) {
	p := newPool(t, 16)
	c, _ := New(p, Config{MaxBlocks: 8})
	cache := func(ns string, req uint64, tokens []int) {
		s := prefill(t, p, kv.Owner{Tenant: ns, Request: req}, tokens, ns)
		c.Insert(ns, tokens, s)
		s.Free()
	}
	cache("tenant:a", 1, seqOf(bs, 100))
	cache("tenant:b", 2, seqOf(2*bs, 0))
	cache("tenant:b", 3, seqOf(2*bs, 50))
	if n := c.Reclaim(3); n != 3 {
		t.Fatalf("reclaimed %d blocks, want 3", n)
	}
	if st := c.Stats(); st.Blocks["tenant:a"] != 1 || st.Blocks["tenant:b"] != 1 {
		t.Fatalf("after reclaiming 3 blocks: %v; want a's block kept and one of b's", st.Blocks)
	}
	// b's remaining block is the first block of its most recent prompt.
	if hit, _ := c.Lookup("tenant:b", seqOf(2*bs, 50)); len(hit) != 1 {
		t.Fatalf("b's most recent prefix matched %d blocks, want 1", len(hit))
	}
	// Now a and b hold one block each; a's is older (the lookup touched b's).
	if c.Reclaim(1); c.Stats().Blocks["tenant:a"] != 0 {
		t.Fatalf("a tie went to the newer block: %v", c.Stats().Blocks)
	}
}

// Reclaim never takes the blocks it is told to keep (the prefix the
// allocation it makes room for will attach), and Reclaimable does not
// count them, nor their ancestors; a block a sequence attaches is neither
// taken nor counted either.
func TestReclaimKeepsAndSkips(t *testing.T) {
	p := newPool(t, 16)
	c, _ := New(p, Config{MaxBlocks: 8})
	tokens := seqOf(3*bs, 0)
	s := prefill(t, p, kv.Owner{Tenant: "a", Request: 1}, tokens, "tenant:a")
	c.Insert("tenant:a", tokens, s)
	s.Free()
	other := seqOf(2*bs, 500)
	busy := prefill(t, p, kv.Owner{Tenant: "b", Request: 2}, other, "tenant:b")
	c.Insert("tenant:b", other, busy) // busy still attaches both blocks
	keep, _ := c.Lookup("tenant:a", tokens)
	if len(keep) != 3 {
		t.Fatalf("lookup matched %d blocks, want 3", len(keep))
	}
	if n := c.Reclaimable(); n != 3 {
		t.Fatalf("Reclaimable() = %d; want a's 3 (b's are attached)", n)
	}
	if n := c.Reclaimable(keep[2:]...); n != 0 {
		t.Fatalf("Reclaimable(last block) = %d; want 0: a kept leaf holds its ancestors", n)
	}
	if n := c.Reclaimable(keep[:1]...); n != 2 {
		t.Fatalf("Reclaimable(first block) = %d; want its 2 descendants", n)
	}
	if n := c.Reclaimable(keep...); n != 0 {
		t.Fatalf("Reclaimable(all of a's) = %d; want 0", n)
	}
	if n := c.Reclaim(5, keep...); n != 0 {
		t.Fatalf("Reclaim kept nothing of what it was told: took %d blocks", n)
	}
	busy.Free()
	if n := c.Reclaim(5, keep...); n != 2 || c.Stats().Blocks["tenant:a"] != 3 {
		t.Fatalf("Reclaim(5, a's blocks) took %d, left %v; want b's 2 and a's 3 kept", n, c.Stats().Blocks)
	}
}

// Reclaimable answers from its last count while nothing changed, so every
// event that changes what the cache could give back must make it count
// again: a sequence attaching cached blocks, their release (by the
// sequence, and by a lease that outlives it), and blocks added or
// removed. (A lease pins only pages its sequence holds, which are not
// idle already, so taking one changes no answer.)
func TestReclaimableFollowsHolds(t *testing.T) {
	p := newPool(t, 16)
	c, _ := New(p, Config{MaxBlocks: 8})
	tokens := seqOf(3*bs, 0)
	s := prefill(t, p, kv.Owner{Tenant: "a", Request: 1}, tokens, "tenant:a")
	c.Insert("tenant:a", tokens, s)
	want := func(step string, n int) {
		t.Helper()
		if got := c.Reclaimable(); got != n {
			t.Fatalf("%s: Reclaimable() = %d; want %d", step, got, n)
		}
	}
	want("the writer still attaches every block", 0)
	s.Free()
	want("the writer freed", 3)
	hits, _ := c.Lookup("tenant:a", tokens[:2*bs])
	reader, err := p.AllocWithPrefix(kv.Owner{Tenant: "a", Request: 2}, hits, 2*bs+1)
	if err != nil {
		t.Fatal(err)
	}
	want("a reader attaches the first 2 blocks", 1)
	lease, err := reader.Lease()
	if err != nil {
		t.Fatal(err)
	}
	reader.Free()
	want("the reader freed, its lease still pins them", 1)
	lease.Release()
	want("the lease released", 3)
	c.Evict("tenant:a", 1)
	want("a block evicted", 2)
	more := seqOf(4*bs, 0)
	w := prefill(t, p, kv.Owner{Tenant: "a", Request: 3}, more, "tenant:a")
	c.Insert("tenant:a", more, w)
	want("2 blocks inserted that their writer attaches", 0)
	w.Free()
	want("their writer freed", 4)
}

func TestForeignPageIsNotCached(t *testing.T) {
	p := newPool(t, 16)
	c, _ := New(p, Config{})
	tokens := seqOf(8, 0)
	a := prefill(t, p, kv.Owner{Tenant: "a", Request: 1}, tokens, "a")
	c.Insert("tenant:a", tokens, a)
	hits, _ := c.Lookup("tenant:a", tokens)
	// An engine bug: a sequence that attached namespace a's pages inserts
	// under namespace b. The cache must refuse rather than re-home them.
	b, err := p.AllocWithPrefix(kv.Owner{Tenant: "b", Request: 2}, hits, 8)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Insert("tenant:b", tokens, b); !errors.Is(err, ErrNamespace) || n != 0 {
		t.Fatalf("insert of a's pages under b: %d, %v; want ErrNamespace", n, err)
	}
	if _, m := c.Lookup("tenant:b", tokens); m != 0 {
		t.Fatal("namespace b hits a's pages")
	}
}
