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
func TestNoCrossNamespaceHits(t *testing.T) {
	namespaces := []string{"tenant:a", "tenant:b", "group:c"}
	const quota = 5
	rapid.Check(t, func(t *rapid.T) {
		p, err := kv.NewPool(kv.PoolConfig{Pages: 24, PageSize: bs, Layers: 2, KVDim: 2})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(p, Config{MaxBlocks: quota})
		if err != nil {
			t.Fatal(err)
		}
		var live []*kv.Seq
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
				defer s.Free()
				buf := make([]float32, 2*matched)
				for l := range 2 {
					if err := s.ReadTokens(l, 0, matched, buf, buf); err != nil {
						t.Fatal(err)
					}
					for pos := range matched {
						if k0, k1 := content(ns, tokens[:pos+1]); buf[2*pos] != k0 || buf[2*pos+1] != k1 {
							t.Fatalf("invariant 1: %s position %d of layer %d holds KV of another prefix or namespace", ns, pos, l)
						}
					}
				}
			},
			"evict": func(t *rapid.T) {
				c.Evict(rapid.SampledFrom(namespaces).Draw(t, "ns"), rapid.IntRange(1, 3).Draw(t, "n"))
			},
			"reclaim": func(t *rapid.T) { c.Reclaim(rapid.IntRange(1, 3).Draw(t, "n")) },
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
					if n > quota {
						t.Fatalf("invariant 3: %s caches %d blocks, quota %d", ns, n, quota)
					}
				}
				if st.ReleaseErrors != 0 || p.Stats().Violations != 0 {
					t.Fatalf("invariant 3: %d release errors, %d violations", st.ReleaseErrors, p.Stats().Violations)
				}
			},
		})
		for _, s := range live {
			s.Free()
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
