package prefix

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"pgregory.net/rapid"
)

// TestNoCrossNamespaceHits drives the cache with random prompts from a
// tiny vocabulary, so namespaces keep inserting the very same token blocks.
// The invariants, checked on every lookup and after every action:
//
//  1. A lookup in namespace ns only returns pages that were cached under
//     ns: each ref's owner is ns, and the page's KV, attached and read
//     back, is the KV a prefill under ns wrote for exactly those tokens.
//  2. The matched length is a whole number of blocks and a prefix of the
//     tokens asked about.
//  3. No namespace holds more blocks than its quota; the pool sees no
//     ownership violation and the cache no release error.
//  4. Once the cache is cleared and every sequence freed, every page is
//     free and scrubbed.
//  5. A sequence that attached cached blocks reads them back unchanged for
//     as long as it lives, whatever the cache evicts meanwhile.
//  6. Reclaim takes only blocks whose page the cache alone holds, each
//     freeing a page, as many as Reclaimable said, and from a namespace
//     holding the most blocks among those with such a block, so one
//     namespace's pressure never shrinks a smaller one.
//  7. The tree is whole: every block's parent is cached, child counts and
//     per-namespace block counts match the blocks, and LRU order puts no
//     block before its parent (so leaves go first).
func TestNoCrossNamespaceHits(t *testing.T) {
	namespaces := []string{"tenant:a", "tenant:b", "group:c"}
	// group:c's quota is below the longest chain, so inserts there keep
	// meeting a full namespace part-way along a cached chain.
	quotas := map[string]int{"tenant:a": 5, "tenant:b": 5, "group:c": 2}
	rapid.Check(t, func(t *rapid.T) {
		p, err := kv.NewPool(kv.PoolConfig{Pages: 24, PageSize: bs, Layers: 2, KVDim: 2})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(p, Config{MaxBlocks: 5, NamespaceBlocks: map[string]int{"group:c": 2}})
		if err != nil {
			t.Fatal(err)
		}
		var live []*kv.Seq
		var held []attached
		prompt := rapid.SliceOfN(rapid.IntRange(0, 1), 0, 3*bs+2)
		var req uint64

		t.Repeat(map[string]func(*rapid.T){
			"insert": func(t *rapid.T) {
				ns := rapid.SampledFrom(namespaces).Draw(t, "ns")
				tokens := prompt.Draw(t, "tokens")
				if len(tokens) == 0 {
					t.Skip("empty prompt")
				}
				req++
				s, err := p.Alloc(kv.Owner{Tenant: ns, Request: req}, len(tokens))
				if err != nil {
					t.Skip("pool full")
				}
				k := make([]float32, 2*len(tokens))
				for pos := range tokens {
					k[2*pos], k[2*pos+1] = content(ns, tokens[:pos+1])
				}
				for l := range 2 {
					if err := s.WriteTokens(l, 0, len(tokens), k, k); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := c.Insert(ns, tokens, s); err != nil {
					t.Fatalf("Insert: %v", err)
				}
				if rapid.Bool().Draw(t, "keep") {
					live = append(live, s)
				} else {
					s.Free()
				}
			},
			"lookup": func(t *rapid.T) {
				ns := rapid.SampledFrom(namespaces).Draw(t, "ns")
				tokens := prompt.Draw(t, "tokens")
				hits, matched := c.Lookup(ns, tokens)
				if matched != len(hits)*bs || matched > len(tokens) {
					t.Fatalf("invariant 2: matched %d tokens with %d blocks of a %d-token prompt", matched, len(hits), len(tokens))
				}
				for _, r := range hits {
					if r.Owner().Tenant != ns {
						t.Fatalf("invariant 1: lookup in %s returned a page of %s", ns, r.Owner().Tenant)
					}
				}
				if matched == 0 {
					return
				}
				req++
				s, err := p.AllocWithPrefix(kv.Owner{Tenant: ns, Request: req}, hits, matched)
				if err != nil {
					t.Fatalf("attach: %v", err)
				}
				a := attached{s: s, ns: ns, tokens: tokens[:matched]}
				a.check(t)
				if rapid.Bool().Draw(t, "keepAttached") {
					// Invariant 5: it must still read back after the
					// cache evicts the blocks and their writers are freed.
					held = append(held, a)
				} else {
					s.Free()
				}
			},
			"reread": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("nothing attached")
				}
				held[rapid.IntRange(0, len(held)-1).Draw(t, "held")].check(t)
			},
			"evict": func(t *rapid.T) {
				c.Evict(rapid.SampledFrom(namespaces).Draw(t, "ns"), rapid.IntRange(1, 3).Draw(t, "n"))
			},
			"reclaim": func(t *rapid.T) { c.Reclaim(rapid.IntRange(1, 3).Draw(t, "n")) },
			"reclaim one": func(t *rapid.T) {
				before := c.Stats().Blocks
				// The namespaces Reclaim may take from: those with a block
				// whose page only the cache holds (it frees nothing else).
				idle := map[string]bool{}
				c.mu.Lock()
				for name, sp := range c.spaces {
					idle[name] = sp.oldestIdleLeaf(p, nil) != nil
				}
				c.mu.Unlock()
				can := c.Reclaimable()
				c.mu.Lock()
				walked, _ := c.reclaimable(nil)
				c.mu.Unlock()
				if can != walked {
					t.Fatalf("Reclaimable() = %d from its last count; a walk over the blocks counts %d", can, walked)
				}
				free := p.Stats().Free
				if got := c.Reclaim(1); got != min(1, can) {
					t.Fatalf("Reclaim(1) removed %d blocks; Reclaimable said %d", got, can)
				} else if got == 0 {
					return
				}
				if now := p.Stats().Free; now != free+1 {
					t.Fatalf("reclaiming a block freed %d pages; want 1", now-free)
				}
				after := c.Stats().Blocks
				for ns, n := range before {
					if after[ns] == n {
						continue
					}
					if !idle[ns] {
						t.Fatalf("reclaim took a block of %s, which held no block only the cache held", ns)
					}
					for other, m := range before {
						if m > n && idle[other] {
							t.Fatalf("reclaim took a block of %s (%d blocks) while %s held %d it could take", ns, n, other, m)
						}
					}
				}
			},
			"free": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing live")
				}
				i := rapid.IntRange(0, len(live)-1).Draw(t, "seq")
				live[i].Free()
				live = append(live[:i], live[i+1:]...)
			},
			"": func(t *rapid.T) {
				st := c.Stats()
				for ns, n := range st.Blocks {
					if n > quotas[ns] {
						t.Fatalf("invariant 3: %s caches %d blocks, quota %d", ns, n, quotas[ns])
					}
				}
				if st.ReleaseErrors != 0 || p.Stats().Violations != 0 {
					t.Fatalf("invariant 3: %d release errors, %d violations", st.ReleaseErrors, p.Stats().Violations)
				}
				checkTree(t, c)
			},
		})
		for _, s := range live {
			s.Free()
		}
		for _, a := range held {
			a.check(t)
			a.s.Free()
		}
		c.Clear()
		if st := p.Stats(); st.Free != st.Pages {
			t.Fatalf("invariant 4: %d of %d pages free after teardown", st.Free, st.Pages)
		}
		if err := p.CheckScrubbed(); err != nil {
			t.Fatalf("invariant 4: %v", err)
		}
	})
}

// attached is a sequence that attached the cached blocks of tokens in ns.
type attached struct {
	s      *kv.Seq
	ns     string
	tokens []int
}

// check is invariant 1 (and 5): the attached positions hold the KV a
// prefill under ns wrote for exactly these tokens.
func (a attached) check(t *rapid.T) {
	n := len(a.tokens)
	buf := make([]float32, 2*n)
	for l := range 2 {
		if err := a.s.ReadTokens(l, 0, n, buf, buf); err != nil {
			t.Fatalf("read attached blocks: %v", err)
		}
		for pos := range n {
			if k0, k1 := content(a.ns, a.tokens[:pos+1]); buf[2*pos] != k0 || buf[2*pos+1] != k1 {
				t.Fatalf("invariant 1: %s position %d of layer %d holds KV of another prefix or namespace", a.ns, pos, l)
			}
		}
	}
}

// checkTree is invariant 6, on the cache's own state.
func checkTree(t *rapid.T, c *Cache) {
	children := map[*node]int{}
	blocks := map[*space]int{}
	for k, n := range c.nodes {
		if n.key != k {
			t.Fatalf("invariant 6: block %v stored under key %v", n.key, k)
		}
		blocks[n.ns]++
		if n.parent != nil {
			if c.nodes[n.parent.key] != n.parent {
				t.Fatalf("invariant 6: block %v is cached without its parent", k)
			}
			children[n.parent]++
			if n.stamp > n.parent.stamp {
				t.Fatalf("invariant 6: block %v was used after its parent", k)
			}
		}
	}
	for _, n := range c.nodes {
		if n.children != children[n] {
			t.Fatalf("invariant 6: block %v counts %d children, has %d", n.key, n.children, children[n])
		}
	}
	for _, sp := range c.spaces {
		if sp.blocks != blocks[sp] || sp.lru.Len() != sp.blocks {
			t.Fatalf("invariant 6: %s counts %d blocks, lists %d, has %d", sp.name, sp.blocks, sp.lru.Len(), blocks[sp])
		}
	}
}
