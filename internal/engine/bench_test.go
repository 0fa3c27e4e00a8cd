package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/perf"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
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

// startBenchEngine runs an engine over m with a KV pool of poolTokens
// tokens configured by pc, until the benchmark ends.
func startBenchEngine(b *testing.B, m *model.Model, pc kv.PoolConfig, lim Limits, maxRunning int) *Engine {
	pool, err := kv.NewPool(pc)
	if err != nil {
		b.Fatal(err)
	}
	threads := kernels.NewPool(0)
	e, err := New(Config{Limits: lim, BatchTokens: 512, MaxRunning: maxRunning}, m, threads, pool)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; threads.Close() })
	return e
}

// benchRound submits streams requests (4 tenants, prompts differing in
// their second token) at once and waits for all of them; it returns the
// tokens generated and the wall time.
func benchRound(b *testing.B, e *Engine, streams, promptLen, maxTokens int) (int, time.Duration) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	tokens := 0
	start := time.Now()
	for s := 0; s < streams; s++ {
		prompt := make([]int, promptLen)
		for i := range prompt {
			prompt[i] = 3 + i
		}
		prompt[0], prompt[min(1, promptLen-1)] = 1, 3+s
		a, rej := Admit(Request{Tenant: fmt.Sprint("t", s%4), Prompt: prompt, MaxTokens: maxTokens}, e.Limits())
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
	return tokens, time.Since(start)
}

// BenchmarkIsolationCost measures decode throughput of 16 concurrent
// streams on a random 15M-shape Q8_0 model with the isolation machinery on
// (owner-tag checks on every page read, pages zeroed on free) and off, in
// alternating rounds of the two engines, so that the machine's drift
// (this is a shared machine) falls on both alike. cost% is how much slower
// the rounds with the machinery on were, over all rounds; median-cost% is
// the median over iterations of the same for the two rounds of one
// iteration, which a burst of the machine's noise in a single round
// moves much less.
//
//	go test -run '^$' -bench IsolationCost -benchtime 20x ./internal/engine/
func BenchmarkIsolationCost(b *testing.B) {
	m := benchModel(b, "15M")
	lim := Limits{ContextLen: 256, MaxInputTokens: 256, PoolTokens: 4096}
	on := kv.ConfigFor(&m.Config, 256, 16)
	on.Scrub = kv.ScrubZero
	off := on
	off.Scrub, off.SkipOwnerChecks = kv.ScrubOff, true
	eOn := startBenchEngine(b, m, on, lim, 32)
	eOff := startBenchEngine(b, m, off, lim, 32)
	var tokOn, tokOff int
	var tOn, tOff time.Duration
	costs := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first, second := eOn, eOff
		if i%2 == 1 {
			first, second = eOff, eOn
		}
		var on, off float64
		for _, e := range []*Engine{first, second} {
			n, d := benchRound(b, e, 16, 32, 64)
			if e == eOn {
				tokOn, tOn, on = tokOn+n, tOn+d, float64(n)/d.Seconds()
			} else {
				tokOff, tOff, off = tokOff+n, tOff+d, float64(n)/d.Seconds()
			}
		}
		costs = append(costs, 100*(off-on)/off)
	}
	rOn, rOff := float64(tokOn)/tOn.Seconds(), float64(tokOff)/tOff.Seconds()
	b.ReportMetric(rOn, "on-tokens/s")
	b.ReportMetric(rOff, "off-tokens/s")
	b.ReportMetric(100*(rOff-rOn)/rOff, "cost%")
	slices.Sort(costs)
	b.ReportMetric(costs[len(costs)/2], "median-cost%")
}

// BenchmarkBatchedDecode measures what continuous batching buys on the
// random 110M-shape Q8_0 model: aggregate decode tokens/s of 1, 8 and 32
// concurrent streams (8-token prompts, 128 new tokens each) through the
// engine alone, without HTTP, with an f32 and an f16 KV cache. The 32-stream figure over the 1-stream one is
// the batching gain; `bulkhead bench load` measures the same through the
// API.
//
//	go test -run '^$' -bench BatchedDecode -benchtime 2x ./internal/engine/
func BenchmarkBatchedDecode(b *testing.B) {
	m := benchModel(b, "110M")
	layerMACs, outMACs := m.MACsPerToken()
	const poolTokens = 32 * 160
	lim := Limits{ContextLen: 512, MaxInputTokens: 512, PoolTokens: poolTokens}
	for _, kvt := range []model.KVType{model.KVF32, model.KVF16} {
		pc := kv.ConfigFor(&m.Config, poolTokens, 16)
		pc.Type = kvt
		e := startBenchEngine(b, m, pc, lim, 64)
		for _, streams := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("kv=%v/streams=%d", kvt, streams), func(b *testing.B) {
				tokens := 0
				var d time.Duration
				ceil := perf.MACRate(m.WeightType, runtime.GOMAXPROCS(0), 3)
				for i := 0; i < b.N; i++ {
					n, t := benchRound(b, e, streams, 8, 128)
					tokens, d = tokens+n, d+t
				}
				ceil = (ceil + perf.MACRate(m.WeightType, runtime.GOMAXPROCS(0), 3)) / 2
				b.ReportMetric(float64(tokens)/d.Seconds(), "tokens/s")
				// Every decoded token runs every product, the classifier
				// included; ceiling% is how much of the arithmetic ceiling
				// measured around the run the products used.
				if ceil > 0 {
					b.ReportMetric(100*float64(tokens)/d.Seconds()*float64(layerMACs+outMACs)/ceil, "ceiling%")
				}
			})
		}
	}
}

// BenchmarkDraws measures a step's sampling at 32 streams over a
// 32,000-token vocabulary (temperature 0.8, top_p 0.95; and greedy) on one
// thread and spread over two: the step's goroutine drew every token alone
// before draws.
//
//	go test -run '^$' -bench Draws ./internal/engine/
func BenchmarkDraws(b *testing.B) {
	const streams, vocab = 32, 32000
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([][]float32, streams)
	for i := range logits {
		logits[i] = make([]float32, vocab)
		for j := range logits[i] {
			logits[i][j] = float32(rng.NormFloat64() * 3)
		}
	}
	for _, p := range []sample.Params{{Temperature: 0.8, TopP: 0.95}, {}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("temperature=%g/threads=%d", p.Temperature, threads), func(b *testing.B) {
				pool := kernels.NewPool(threads)
				defer pool.Close()
				d := newDraws(pool)
				reqs := make([]*request, streams)
				for i := range reqs {
					p.Seed = uint64(i)
					reqs[i] = &request{sampler: sample.New(p)}
				}
				for b.Loop() {
					d.reset()
					for i, r := range reqs {
						d.add(r, logits[i])
					}
					d.run()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
			})
		}
	}
}
