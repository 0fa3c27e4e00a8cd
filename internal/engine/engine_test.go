package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

var (
	defaultOnce  sync.Once
	defaultModel *model.Model
)

func stories(t testing.TB) *model.Model {
	defaultOnce.Do(func() {
		m, err := model.Default()
		if err != nil {
			t.Fatal(err)
		}
		defaultModel = m
	})
	return defaultModel
}

type harness struct {
	e      *Engine
	pool   *kv.Pool
	cancel context.CancelFunc
	done   chan error
}

func startEngine(t testing.TB, m *model.Model, pages, pageSize int, cfg Config, setup ...func(*kv.Pool, *Config)) *harness {
	t.Helper()
	return startEngineKV(t, m, pages, pageSize, model.KVF32, cfg, setup...)
}

// startEngineKV is startEngine over a pool storing KV as kvt.
func startEngineKV(t testing.TB, m *model.Model, pages, pageSize int, kvt model.KVType, cfg Config, setup ...func(*kv.Pool, *Config)) *harness {
	t.Helper()
	pc := kv.ConfigFor(&m.Config, pages, pageSize)
	pc.Scrub, pc.Type = kv.ScrubPoison, kvt
	return startEnginePool(t, m, pc, cfg, setup...)
}

// startEnginePool is startEngine over a pool made with pc.
func startEnginePool(t testing.TB, m *model.Model, pc kv.PoolConfig, cfg Config, setup ...func(*kv.Pool, *Config)) *harness {
	t.Helper()
	pages, pageSize := pc.Pages, pc.PageSize
	pool, err := kv.NewPool(pc)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(pool, &cfg)
	}
	threads := kernels.NewPool(1)
	if cfg.Limits == (Limits{}) {
		cfg.Limits = Limits{ContextLen: m.Config.ContextLen, MaxInputTokens: m.Config.ContextLen, PoolTokens: pages * pageSize}
	}
	e, err := New(cfg, m, threads, pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{e: e, pool: pool, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-h.done
		threads.Close()
	})
	return h
}

// solo generates the reference output of a request run alone, through the
// model's own single-sequence path with dense KV storage: no pool, no
// batching, no scheduler.
func solo(t testing.TB, m *model.Model, prompt []int, maxTokens int, p sample.Params) []int {
	t.Helper()
	return soloKV(t, m, prompt, maxTokens, p, model.KVF32)
}

// soloKV is solo with dense storage of type kvt.
func soloKV(t testing.TB, m *model.Model, prompt []int, maxTokens int, p sample.Params, kvt model.KVType) []int {
	t.Helper()
	threads := kernels.NewPool(1)
	defer threads.Close()
	r := m.NewRunner(threads, 64, 0)
	cache, err := model.NewDenseCacheOf(&m.Config, len(prompt)+maxTokens, kvt)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	_, err = r.Generate(prompt, cache, maxTokens, sample.New(p), func(tok int) bool {
		out = append(out, tok)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func collect(ctx context.Context, s *Stream) ([]int, *Result, error) {
	var out []int
	for {
		toks, res, err := s.Next(ctx)
		if err != nil {
			return out, nil, err
		}
		out = append(out, toks...)
		if res != nil {
			return out, res, nil
		}
	}
}

func admit(t testing.TB, e *Engine, req Request) Admitted {
	t.Helper()
	a, rej := Admit(req, e.Limits())
	if rej != nil {
		t.Fatalf("admission rejected %d-token prompt: %v", len(req.Prompt), rej)
	}
	return a
}

func TestSingleRequestMatchesSolo(t *testing.T) {
	m := stories(t)
	h := startEngine(t, m, 64, 16, Config{BatchTokens: 32, MaxRunning: 8})
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	want := solo(t, m, prompt, 100, sample.Params{})
	s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 100}))
	if err != nil {
		t.Fatal(err)
	}
	got, res, err := collect(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err != nil {
		t.Fatalf("request failed: %v", res.Err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("engine output differs from solo run:\n got %v\nwant %v", got, want)
	}
	if res.Usage.PromptTokens != len(prompt) || res.Usage.CompletionTokens != len(got) {
		t.Fatalf("usage %+v, want prompt %d completion %d", res.Usage, len(prompt), len(got))
	}
	if res.Finish != FinishLength && res.Finish != FinishStop {
		t.Fatalf("finish %q", res.Finish)
	}
}

// TestIsolationUnderLoad is the engine's leak oracle: many tenants'
// requests share batches, the pool is small enough to force preemption,
// and some clients cancel; every request that completes must equal its own
// solo output token for token, no ownership check may trip, and the pool
// must end entirely free and scrubbed.
func TestIsolationUnderLoad(t *testing.T) {
	t.Run("no prefix cache", func(t *testing.T) { isolationUnderLoad(t, false, model.KVF32) })
	t.Run("prefix cache", func(t *testing.T) { isolationUnderLoad(t, true, model.KVF32) })
	// An f16 cache: each response must equal that request run alone over
	// dense f16 storage, through preemption, the prefix cache and batching.
	t.Run("prefix cache, f16 KV", func(t *testing.T) { isolationUnderLoad(t, true, model.KVF16) })
}

func isolationUnderLoad(t *testing.T, withPrefix bool, kvt model.KVType) {
	m := stories(t)
	const pages, pageSize = 40, 16 // 640 tokens for up to 64 requests: preemption is certain
	cfg := Config{BatchTokens: 96, MaxRunning: 16}
	var pc *prefix.Cache
	h := startEngineKV(t, m, pages, pageSize, kvt, cfg, func(pool *kv.Pool, c *Config) {
		if withPrefix {
			var err error
			if pc, err = prefix.New(pool, prefix.Config{MaxBlocks: 16}); err != nil {
				t.Fatal(err)
			}
			c.Prefix = pc
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"Once upon a time", "Lily and Tom went to the park", "The little dog was very sad because",
		"One day, a big red ball", "Tim wanted to fly like a bird", "The sun was hot and", "Mom said"}
	type job struct {
		tenant   string
		prompt   []int
		max      int
		params   sample.Params
		cancelAt int // cancel after this many tokens; -1 never
		want     []int
	}
	jobs := make([]job, 64)
	for i := range jobs {
		text := words[rng.IntN(len(words))]
		for k := rng.IntN(4); k > 0; k-- {
			text += " " + words[rng.IntN(len(words))]
		}
		if i%2 == 0 {
			// A shared preamble (like a system prompt) gives the prefix
			// cache whole blocks to hit.
			text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " + text
		}
		j := job{tenant: fmt.Sprintf("tenant-%d", i%4), prompt: m.Tokenizer.Encode(text, true), max: 20 + rng.IntN(100), cancelAt: -1}
		if i%3 == 1 {
			j.params = sample.Params{Temperature: 0.8, TopP: 0.95, Seed: uint64(i)}
		}
		if i%5 == 2 {
			// Penalties and biases depend on the request's own tokens
			// alone, batched or not.
			j.params.FrequencyPenalty, j.params.PresencePenalty = 0.5, 0.3
			j.params.LogitBias = []sample.Bias{{Token: 13, Bias: -3}, {Token: 400, Bias: 2}}
		}
		if i%7 == 3 {
			j.cancelAt = rng.IntN(10)
		}
		j.want = soloKV(t, m, j.prompt, j.max, j.params, kvt)
		jobs[i] = j
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	completed := 0
	var mu sync.Mutex
	for i := range jobs {
		j := jobs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: j.tenant, Prompt: j.prompt, MaxTokens: j.max, Sampling: j.params}))
			if err != nil {
				errs <- err
				return
			}
			var got []int
			for {
				toks, res, err := s.Next(context.Background())
				if err != nil {
					errs <- err
					return
				}
				got = append(got, toks...)
				if j.cancelAt >= 0 && len(got) >= j.cancelAt {
					cancel()
					j.cancelAt = -2
				}
				if res == nil {
					continue
				}
				if res.Err != nil {
					if j.cancelAt == -2 && res.Err.Code == "request_cancelled" {
						return
					}
					errs <- fmt.Errorf("%s request failed: %v", j.tenant, res.Err)
					return
				}
				if fmt.Sprint(got) != fmt.Sprint(j.want) {
					errs <- fmt.Errorf("%s: batched output differs from solo run:\n got %v\nwant %v", j.tenant, got, j.want)
					return
				}
				mu.Lock()
				completed++
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := h.e.Stats()
	if st.Violations != 0 || h.pool.Violations() != 0 {
		t.Fatalf("ownership violations: engine %d, pool %d", st.Violations, h.pool.Violations())
	}
	if st.Preemptions == 0 {
		t.Errorf("the pool was sized to force preemption, but none happened")
	}
	t.Logf("completed %d of %d, %d preemptions, %d steps, %d tokens batched", completed, len(jobs), st.Preemptions, st.Steps, st.BatchedTokens)
	waitIdle(t, h)
	if pc != nil {
		st := pc.Stats()
		t.Logf("prefix cache: %d hits, %d misses, %d blocks inserted", st.Hits, st.Misses, st.Inserted)
		if st.Hits == 0 {
			t.Errorf("prefix cache never hit, so this run did not exercise it")
		}
		pc.Clear()
	}
	ps := h.pool.Stats()
	if ps.Free != pages {
		t.Fatalf("pool has %d of %d pages free after all requests ended: %+v", ps.Free, pages, ps)
	}
	if err := h.pool.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
}

func waitIdle(t testing.TB, h *harness) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := h.e.Stats()
		if st.Queued == 0 && st.Running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTenantRequestQuota(t *testing.T) {
	m := stories(t)
	h := startEngine(t, m, 64, 16, Config{BatchTokens: 32, MaxRunning: 8, DefaultMaxRequests: 2})
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		if _, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 200})); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 10}))
	if e := errkind.Of(err); err == nil || e.Kind != errkind.Quota {
		t.Fatalf("third request of tenant a: got %v, want a quota error", err)
	}
	// Another tenant is unaffected.
	s, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: "b", Prompt: prompt, MaxTokens: 5}))
	if err != nil {
		t.Fatalf("tenant b blocked by tenant a's quota: %v", err)
	}
	if _, res, _ := collect(ctx, s); res == nil || res.Err != nil {
		t.Fatalf("tenant b's request: %+v", res)
	}
}

func TestAdmitLimits(t *testing.T) {
	lim := Limits{ContextLen: 100, MaxInputTokens: 50, PoolTokens: 80}
	prompt := func(n int) []int { return make([]int, n) }
	cases := []struct {
		n, max int
		ok     bool
	}{
		{50, 1, true}, {51, 1, false}, // max_input_tokens
		{50, 30, true}, {50, 31, false}, // pool tokens (80) is tighter than context (100)
	}
	for _, c := range cases {
		_, rej := Admit(Request{Prompt: prompt(c.n), MaxTokens: c.max}, lim)
		if (rej == nil) != c.ok {
			t.Errorf("prompt %d + max %d: rejected=%v, want ok=%v (%v)", c.n, c.max, rej != nil, c.ok, rej)
		}
		if rej != nil && (rej.Code != "context_length_exceeded" || rej.Kind != errkind.BadInput) {
			t.Errorf("rejection %+v, want a bad-input context_length_exceeded", rej)
		}
	}
	lim.PoolTokens = 1000
	if _, rej := Admit(Request{Prompt: prompt(50), MaxTokens: 50}, lim); rej != nil {
		t.Errorf("exactly at the context limit rejected: %v", rej)
	}
	if _, rej := Admit(Request{Prompt: prompt(50), MaxTokens: 51}, lim); rej == nil {
		t.Errorf("context limit + 1 admitted")
	}
	var zero Admitted
	if zero.Valid() {
		t.Errorf("the zero Admitted claims to be valid")
	}
}

// TestPrefixCacheScopedToTenant asserts both halves of prefix-cache
// isolation: a tenant's repeated prompt hits its own cache, another tenant
// sending the same prompt misses, and a hit yields exactly the output of a
// miss.
func TestPrefixCacheScopedToTenant(t *testing.T) {
	m := stories(t)
	var pc *prefix.Cache
	h := startEngine(t, m, 64, 16, Config{BatchTokens: 64, MaxRunning: 8}, func(pool *kv.Pool, c *Config) {
		var err error
		if pc, err = prefix.New(pool, prefix.Config{MaxBlocks: 32}); err != nil {
			t.Fatal(err)
		}
		c.Prefix = pc
	})
	prompt := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.", true)
	if len(prompt) < 33 {
		t.Fatalf("prompt of %d tokens is too short to fill two 16-token blocks", len(prompt))
	}
	want := solo(t, m, prompt, 30, sample.Params{})
	run := func(tenant string) ([]int, Usage) {
		s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: tenant, Prompt: prompt, MaxTokens: 30}))
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := collect(context.Background(), s)
		if err != nil || res.Err != nil {
			t.Fatalf("tenant %s: %v %v", tenant, err, res.Err)
		}
		return got, res.Usage
	}
	first, u1 := run("alice")
	second, u2 := run("alice")
	other, u3 := run("mallory")
	if u1.CachedTokens != 0 {
		t.Errorf("first request reports %d cached tokens on a cold cache", u1.CachedTokens)
	}
	if want := (len(prompt) - 1) / 16 * 16; u2.CachedTokens != want {
		t.Errorf("same tenant's repeat: %d cached tokens, want %d", u2.CachedTokens, want)
	}
	if u3.CachedTokens != 0 {
		t.Errorf("another tenant hit alice's cache: %d cached tokens", u3.CachedTokens)
	}
	for name, got := range map[string][]int{"miss": first, "hit": second, "other tenant": other} {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s output differs from the solo run:\n got %v\nwant %v", name, got, want)
		}
	}
	if u2.PromptTokens != len(prompt) {
		t.Errorf("usage.prompt_tokens = %d on a hit, want the full prompt %d", u2.PromptTokens, len(prompt))
	}
}

// A request whose context is cancelled before it is submitted is refused
// at once. One whose context is cancelled while Submit runs may see the
// cancellation hook fire inside Submit, before Submit has stored it, and
// the loop then finish the request from the hook's hand-over: under -race
// the loop must never read the hook while Submit writes it. Either way
// every request ends (cancelled, or complete if the cancel came late),
// and its tenant's slot and pages come back.
func TestSubmitCancelledContext(t *testing.T) {
	m := stories(t)
	h := startEngine(t, m, 64, 16, Config{BatchTokens: 32, MaxRunning: 8, DefaultMaxRequests: 2})
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 20})); errkind.Of(err) == nil || errkind.Of(err).Code != "request_cancelled" {
		t.Fatalf("a request cancelled before it was submitted: got %v, want request_cancelled", err)
	}
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		s, err := h.e.Submit(ctx, admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 20}))
		if err != nil {
			if e := errkind.Of(err); e == nil || e.Code != "request_cancelled" {
				t.Fatalf("submission %d: %v", i, err)
			}
			continue
		}
		toks, res, err := collect(context.Background(), s)
		switch {
		case err != nil || res == nil:
			t.Fatalf("submission %d: stream ended with %v", i, err)
		case res.Err != nil && res.Err.Code != "request_cancelled":
			t.Fatalf("submission %d: %v", i, res.Err)
		case res.Err == nil && len(toks) != 20:
			t.Fatalf("submission %d: finished with %d tokens of 20", i, len(toks))
		}
	}
	// The tenant's two slots are free again, and so is every page.
	for i := 0; i < 2; i++ {
		s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 3}))
		if err != nil {
			t.Fatalf("after the cancelled ones, request %d of tenant a: %v", i, err)
		}
		if _, res, _ := collect(context.Background(), s); res == nil || res.Err != nil {
			t.Fatalf("after the cancelled ones, request %d: %+v", i, res)
		}
	}
	if st := h.pool.Stats(); st.Owned != 0 || st.Pending != 0 {
		t.Fatalf("pages still held after every request ended: %+v", st)
	}
}

// A request submitted while the engine shuts down is either refused or
// ends (failed with shutting_down, or finished), never left with a stream
// that no one will close: the hand-over and the shutdown's drain are
// ordered by the engine's lock.
func TestSubmitDuringShutdown(t *testing.T) {
	m := stories(t)
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	for i := 0; i < 100; i++ {
		pc := kv.ConfigFor(&m.Config, 64, 16)
		pool, err := kv.NewPool(pc)
		if err != nil {
			t.Fatal(err)
		}
		threads := kernels.NewPool(1)
		lim := Limits{ContextLen: m.Config.ContextLen, MaxInputTokens: m.Config.ContextLen, PoolTokens: 64 * 16}
		e, err := New(Config{BatchTokens: 32, MaxRunning: 8, Limits: lim}, m, threads, pool)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		streams := make(chan *Stream, 4)
		var wg sync.WaitGroup
		for j := 0; j < 4; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s, err := e.Submit(context.Background(), admit(t, e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 50})); err == nil {
					streams <- s
				}
			}()
		}
		stop()
		wg.Wait()
		<-done
		close(streams)
		for s := range streams {
			wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, res, err := collect(wait, s)
			cancel()
			if err != nil || res == nil {
				t.Fatalf("round %d: a request submitted during shutdown never ended: %v", i, err)
			}
		}
		threads.Close()
	}
}
