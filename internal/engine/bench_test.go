package engine

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

func benchModel(b *testing.B, shape string) *model.Model {
	cm, err := convert.Random(convert.Shapes[shape], 1)
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := convert.WriteGGUF(&buf, cm, tensor.Q8_0); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.FromGGUF(f)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkIsolationCost measures decode throughput of 16 concurrent
// streams on a random 15M-shape Q8_0 model with the isolation machinery on
// (owner-tag checks on every page read, pages zeroed on free) and off. The
// difference is the price of the checks; compare the tokens/s metrics.
//
//	go test -run '^$' -bench IsolationCost -count 5 ./internal/engine/ | benchstat -
func BenchmarkIsolationCost(b *testing.B) {
	m := benchModel(b, "15M")
	for _, mode := range []struct {
		name string
		off  bool
	}{{"checks=on", false}, {"checks=off", true}} {
		b.Run(mode.name, func(b *testing.B) {
			pc := kv.ConfigFor(&m.Config, 256, 16)
			pc.Scrub = kv.ScrubZero
			if mode.off {
				pc.Scrub, pc.SkipOwnerChecks = kv.ScrubOff, true
			}
			pool, err := kv.NewPool(pc)
			if err != nil {
				b.Fatal(err)
			}
			threads := kernels.NewPool(0)
			defer threads.Close()
			e, err := New(Config{Limits: Limits{ContextLen: 256, MaxInputTokens: 256, PoolTokens: 4096}, BatchTokens: 256, MaxRunning: 32}, m, threads, pool)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			prompt := make([]int, 32)
			for i := range prompt {
				prompt[i] = 3 + i
			}
			tokens := 0
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for s := 0; s < 16; s++ {
					a, rej := Admit(Request{Tenant: fmt.Sprint("t", s%4), Prompt: prompt, MaxTokens: 64}, e.Limits())
					if rej != nil {
						b.Fatal(rej)
					}
					st, err := e.Submit(context.Background(), a)
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						got, res, err := collect(context.Background(), st)
						if err != nil || res.Err != nil {
							b.Error(err, res.Err)
						}
						mu.Lock()
						tokens += len(got)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}

// BenchmarkBatchedDecode measures what continuous batching buys on the
// random 110M-shape Q8_0 model: aggregate decode tokens/s of 1, 8 and 32
// concurrent streams (8-token prompts, 128 new tokens each) through the
// engine alone, without HTTP. The 32-stream figure over the 1-stream one is
// the batching gain; `bulkhead bench load` measures the same through the
// API.
//
//	go test -run '^$' -bench BatchedDecode -benchtime 1x ./internal/engine/
func BenchmarkBatchedDecode(b *testing.B) {
	m := benchModel(b, "110M")
	for _, streams := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			pool, err := kv.NewPool(kv.ConfigFor(&m.Config, 64*160, 16))
			if err != nil {
				b.Fatal(err)
			}
			threads := kernels.NewPool(0)
			defer threads.Close()
			e, err := New(Config{Limits: Limits{ContextLen: 512, MaxInputTokens: 512, PoolTokens: 64 * 160}, BatchTokens: 512, MaxRunning: 64}, m, threads, pool)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			tokens := 0
			start := time.Now()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for s := 0; s < streams; s++ {
					prompt := []int{1, 3 + s, 4 + s, 5 + s, 6, 7, 8, 9}
					a, rej := Admit(Request{Tenant: fmt.Sprint("t", s%4), Prompt: prompt, MaxTokens: 128}, e.Limits())
					if rej != nil {
						b.Fatal(rej)
					}
					st, err := e.Submit(context.Background(), a)
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						got, res, err := collect(context.Background(), st)
						if err != nil || res.Err != nil {
							b.Error(err, res.Err)
						}
						mu.Lock()
						tokens += len(got)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}
