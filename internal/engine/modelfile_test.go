package engine

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/modeltest"
)

// A request that ends after the model's file was written in place is a
// failure, not a success: its tokens may come from other weights than
// the model's. The pool is free afterwards, and a prefill's lease is
// released rather than handed out.
func TestAnswerAfterTheModelFileChangedFails(t *testing.T) {
	ckpt, tok := modeltest.Files(t)
	m, err := model.Open(ckpt, tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	h := startEngine(t, m, 16, 16, Config{BatchTokens: 64, MaxRunning: 4})
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	run := func() *Result {
		t.Helper()
		s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 8}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, res, err := collect(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(); res.Err != nil {
		t.Fatalf("with the file untouched: %v", res.Err)
	}
	modeltest.Touch(t, ckpt)
	res := run()
	if res.Err == nil || res.Err.Code != "model_file_modified" || !errors.Is(res.Err, model.ErrFileModified) {
		t.Fatalf("after the file changed: %+v; want model_file_modified", res)
	}
	pre, err := h.e.Prefill(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 8}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, res, err := collect(ctx, pre); err != nil || res.Err == nil || res.Handoff != nil {
		t.Fatalf("a prefill after the file changed: %+v, %v; want a failure and no handoff", res, err)
	}
	waitIdle(t, h)
	if st := h.pool.Stats(); st.Free != 16 {
		t.Fatalf("pool after the failures: %+v", st)
	}
}

// A model file cut short under a running engine (cp over it truncates it
// first) fails the requests computing on it, with model_file_modified,
// where the process used to die of SIGBUS with every tenant's requests.
// Cut to nothing, the fault comes in the embedding lookup, on the
// engine's goroutine; cut past the embedding table, in the layers'
// products, which a 60-token prompt spreads over the pool's two threads
// (the worker's fault reaching the caller is TestWorkerFaultReachesTheCaller
// in kernels). Either way the pool ends free and the model's file check
// fails from then on.
func TestModelFileCutShortFailsRequestsNotTheProcess(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	for _, cut := range []string{"to nothing", "past the embedding"} {
		t.Run(cut, func(t *testing.T) {
			ckpt, tok := modeltest.Files(t)
			m, err := model.Open(ckpt, tok)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			pool, err := kv.NewPool(kv.ConfigFor(&m.Config, 32, 16))
			if err != nil {
				t.Fatal(err)
			}
			threads := kernels.NewPool(2)
			e, err := New(Config{BatchTokens: 256, MaxRunning: 4, Limits: Limits{ContextLen: m.Config.ContextLen, MaxInputTokens: m.Config.ContextLen, PoolTokens: 512}}, m, threads, pool)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done; threads.Close() })

			size := int64(0)
			if cut != "to nothing" {
				page := int64(os.Getpagesize())
				size = (llama2c.HeaderBytes + int64(len(m.Embed.Data)) + 2*page) / page * page
			}
			if err := os.Truncate(ckpt, size); err != nil {
				t.Fatal(err)
			}
			var prompt []int
			for len(prompt) < 60 {
				prompt = append(prompt, m.Tokenizer.Encode(" Once upon a time there was a dog.", true)...)
			}
			for range 3 {
				s, err := e.Submit(context.Background(), admit(t, e, Request{Tenant: "a", Prompt: prompt[:60], MaxTokens: 8}))
				if err != nil {
					t.Fatal(err)
				}
				wait, stop := context.WithTimeout(context.Background(), 20*time.Second)
				_, res, err := collect(wait, s)
				stop()
				if err != nil || res.Err == nil || res.Err.Code != "model_file_modified" {
					t.Fatalf("a request on a model cut short: %+v, %v; want model_file_modified", res, err)
				}
			}
			if st := pool.Stats(); st.Free != 32 {
				t.Fatalf("pool after the failures: %+v", st)
			}
			if err := m.CheckFile(); !errors.Is(err, model.ErrFileModified) {
				t.Fatalf("CheckFile after the faults: %v", err)
			}
		})
	}
}
