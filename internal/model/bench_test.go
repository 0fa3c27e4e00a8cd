package model_test

import (
	"fmt"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// BenchmarkDecode110M measures single-stream decode of the 110M shape in
// Q8_0 at positions 1 to 256 (llama-bench's tg256), with an f32 and an f16
// KV cache, reporting weight bytes read per second (the
// memory-bandwidth bound is the physical limit), and checks the forward
// pass allocates nothing per token.
//
//	go test -run '^$' -bench Decode110M -benchmem ./internal/model/
func BenchmarkDecode110M(b *testing.B) {
	m := randomModel(b, convert.Shapes["110M"], tensor.Q8_0)
	for _, kvt := range []model.KVType{model.KVF32, model.KVF16} {
		for _, threads := range []int{1, 2} {
			decode110M(b, m, kvt, threads)
		}
	}
}

func decode110M(b *testing.B, m *model.Model, kvt model.KVType, threads int) {
	b.Run(fmt.Sprintf("kv=%v/threads=%d", kvt, threads), func(b *testing.B) {
		pool := kernels.NewPool(threads)
		defer pool.Close()
		r := m.NewRunner(pool, 256, 0)
		cache, err := model.NewDenseCacheOf(&m.Config, 1024, kvt)
		if err != nil {
			b.Fatal(err)
		}
		prompt := make([]int, 256)
		for i := range prompt {
			prompt[i] = 3 + i
		}
		logits := make([]float32, m.Config.Vocab)
		seq := &model.Seq{Tokens: prompt, Cache: cache, Logits: logits}
		if err := r.Forward([]*model.Seq{seq}); err != nil {
			b.Fatal(err)
		}
		tok := []int{5}
		b.SetBytes(m.WeightBytesPerToken())
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			seq.Tokens, seq.Pos = tok, 1+i%256
			if err := r.Forward([]*model.Seq{seq}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}

// BenchmarkPrefill110M measures a 256-token prefill of the 110M shape in
// Q8_0 (llama-bench's pp256) on one and two threads: the products are
// bound by arithmetic here, so its profile shows what else a prompt
// costs.
//
//	go test -run '^$' -bench Prefill110M ./internal/model/
func BenchmarkPrefill110M(b *testing.B) {
	m := randomModel(b, convert.Shapes["110M"], tensor.Q8_0)
	prompt := make([]int, 256)
	for i := range prompt {
		prompt[i] = 3 + i
	}
	logits := make([]float32, m.Config.Vocab)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			pool := kernels.NewPool(threads)
			defer pool.Close()
			r := m.NewRunner(pool, len(prompt), 0)
			cache, err := model.NewDenseCacheOf(&m.Config, len(prompt), model.KVF32)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				seq := &model.Seq{Tokens: prompt, Cache: cache, Logits: logits}
				if err := r.Forward([]*model.Seq{seq}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
