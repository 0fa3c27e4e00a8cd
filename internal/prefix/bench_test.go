package prefix

import (
	"fmt"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// BenchmarkReclaimableBlocked is a scheduler pass's question while the
// queue waits for pages that running sequences hold: the cache holds
// blocks, every one attached, so nothing is reclaimable and nothing
// changes between passes. "counted" is Reclaimable as the scheduler calls
// it; "walk" is the walk over every block it did at every pass before its
// answer was kept.
func BenchmarkReclaimableBlocked(b *testing.B) {
	for _, blocks := range []int{1000, 20000} {
		p, err := kv.NewPool(kv.PoolConfig{Pages: blocks, PageSize: bs, Layers: 1, KVDim: 2})
		if err != nil {
			b.Fatal(err)
		}
		c, _ := New(p, Config{MaxBlocks: blocks})
		const perSeq = 100 // blocks per cached prompt
		for i := 0; i < blocks/perSeq; i++ {
			tokens := seqOf(perSeq*bs, i*perSeq*bs)
			s, err := p.Alloc(kv.Owner{Tenant: "a", Request: uint64(i + 1)}, len(tokens))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.WriteTokens(0, 0, len(tokens), make([]float32, 2*len(tokens)), make([]float32, 2*len(tokens))); err != nil {
				b.Fatal(err)
			}
			if n, err := c.Insert("tenant:a", tokens, s); n != perSeq || err != nil {
				b.Fatalf("inserted %d blocks: %v", n, err)
			}
			// s stays live: it attaches its blocks, as a running sequence does
		}
		b.Run(fmt.Sprintf("blocks=%d/counted", blocks), func(b *testing.B) {
			for b.Loop() {
				if c.Reclaimable() != 0 {
					b.Fatal("attached blocks counted as reclaimable")
				}
			}
		})
		b.Run(fmt.Sprintf("blocks=%d/walk", blocks), func(b *testing.B) {
			for b.Loop() {
				c.mu.Lock()
				n, _ := c.reclaimable(nil)
				c.mu.Unlock()
				if n != 0 {
					b.Fatal("attached blocks counted as reclaimable")
				}
			}
		})
	}
}
