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
// The fault may hit the engine's goroutine or a pool worker: two threads.
func TestModelFileCutShortFailsRequestsNotTheProcess(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	ckpt, tok := modeltest.Files(t)
	m, err := model.Open(ckpt, tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	pool, err := kv.NewPool(kv.ConfigFor(&m.Config, 16, 16))
	if err != nil {
		t.Fatal(err)
	}
	threads := kernels.NewPool(2)
	e, err := New(Config{BatchTokens: 64, MaxRunning: 4, Limits: Limits{ContextLen: m.Config.ContextLen, MaxInputTokens: m.Config.ContextLen, PoolTokens: 256}}, m, threads, pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; threads.Close() })

	if err := os.Truncate(ckpt, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, err := e.Submit(context.Background(), admit(t, e, Request{Tenant: "a", Prompt: m.Tokenizer.Encode("Once upon a time", true), MaxTokens: 8}))
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
}
