package model_test

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// BenchmarkDecode110M measures single-stream decode of the 110M shape in
// Q8_0 at positions 1 to 256 (llama-bench's tg256), reporting weight bytes read per second (the
// memory-bandwidth bound is the physical limit), and checks the forward
// pass allocates nothing per token.
//
//	go test -run '^$' -bench Decode110M -benchmem ./internal/model/
func BenchmarkDecode110M(b *testing.B) {
	m := randomModel(b, convert.Shapes["110M"], tensor.Q8_0)
	for _, threads := range []int{1, 2} {
		b.Run(map[int]string{1: "threads=1", 2: "threads=2"}[threads], func(b *testing.B) {
			pool := kernels.NewPool(threads)
			defer pool.Close()
			r := m.NewRunner(pool, 256)
			cache := model.NewDenseCache(&m.Config, 1024)
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
}
