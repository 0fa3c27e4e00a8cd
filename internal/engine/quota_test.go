package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// TestQuotaPrefixPreemption drives the page-quota paths of the scheduler
// (a tenant held back by its own quota, preemption of a sequence whose
// tenant is at its limit) together with the prefix cache and pool-wide
// preemption, in a pool far too small for the load: every request must
// still equal its solo output, none may hang, and the pool must end free,
// scrubbed and without an ownership violation.
func TestQuotaPrefixPreemption(t *testing.T) {
	m := stories(t)
	const pages, pageSize = 9, 8
	quota := map[string]int{"a": 5, "b": 6}
	for seed := uint64(1); seed <= 3; seed++ {
		pc := kv.ConfigFor(&m.Config, pages, pageSize)
		pc.TenantPages = quota
		var cache *prefix.Cache
		obs := &lookupCounter{}
		h := startEnginePool(t, m, pc, Config{BatchTokens: 20, MaxRunning: 5, Observer: obs}, func(pool *kv.Pool, c *Config) {
			var err error
			if cache, err = prefix.New(pool, prefix.Config{MaxBlocks: 3}); err != nil {
				t.Fatal(err)
			}
			c.Prefix = cache
		})
		rng := rand.New(rand.NewPCG(seed, 7))
		var wg sync.WaitGroup
		errs := make(chan error, 18)
		for i := range 18 {
			tenant := []string{"a", "b", "c"}[i%3]
			text := "Once upon a time, there was a little girl named Lily."
			if rng.IntN(2) == 0 {
				text += " She liked the sun"
			}
			prompt := m.Tokenizer.Encode(text, true)
			maxTokens := 5 + rng.IntN(40)
			if q, ok := quota[tenant]; ok {
				maxTokens = min(maxTokens, q*pageSize-len(prompt))
			}
			var p sample.Params
			if i%2 == 1 {
				p = sample.Params{Temperature: 0.8, Seed: uint64(i)}
			}
			want := solo(t, m, prompt, maxTokens, p)
			a := admit(t, h.e, Request{Tenant: tenant, Prompt: prompt, MaxTokens: maxTokens, Sampling: p})
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := h.e.Submit(context.Background(), a)
				if err != nil {
					errs <- err
					return
				}
				wait, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				got, res, err := collect(wait, s)
				switch {
				case err != nil || res.Err != nil:
					errs <- fmt.Errorf("tenant %s: %v %+v", tenant, err, res)
				case fmt.Sprint(got) != fmt.Sprint(want):
					errs <- fmt.Errorf("tenant %s: output differs from solo:\n got %v\nwant %v", tenant, got, want)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		waitIdle(t, h)
		t.Logf("seed %d: %+v, %d prefix lookups reported", seed, h.e.Stats(), obs.lookups.Load())
		// One report per request, however often it was preempted before
		// its first token and looked up again.
		if n := obs.lookups.Load(); n > 18 {
			t.Errorf("seed %d: %d prefix lookups reported for 18 requests", seed, n)
		}
		cache.Clear()
		if st := h.pool.Stats(); st.Free != pages || st.Violations != 0 || len(st.TenantPages) != 0 {
			t.Fatalf("seed %d: pool after the requests: %+v", seed, st)
		}
		if err := h.pool.CheckScrubbed(); err != nil {
			t.Fatal(err)
		}
	}
}

// lookupCounter is an Observer that counts the prefix lookups reported.
type lookupCounter struct{ lookups atomic.Int64 }

func (c *lookupCounter) ObserveStep(int, int, int)     {}
func (c *lookupCounter) Preempted(string)              {}
func (c *lookupCounter) OwnershipViolation()           {}
func (c *lookupCounter) PrefixLookup(string, int, int) { c.lookups.Add(1) }
