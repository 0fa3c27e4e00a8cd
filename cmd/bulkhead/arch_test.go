package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peer"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// TestArchitecturesAgreeWithLlamaCpp checks the parts of the forward pass
// the tiny shipped model cannot: wide heads (48 and 64), grouped-query
// attention at an 8:1 ratio, and qwen2's attention biases and rotate-half
// RoPE. Each random-weight model is written as F32 GGUF, and Bulkhead's
// greedy token ids must equal llama.cpp's on the same file.
func TestArchitecturesAgreeWithLlamaCpp(t *testing.T) {
	requirePeer(t)
	shapes := []convert.Shape{
		{Name: "llama-mha", Dim: 288, Hidden: 768, Layers: 3, Heads: 6, KVHeads: 6, Vocab: 2048, ContextLen: 128},
		{Name: "llama-gqa", Dim: 512, Hidden: 1024, Layers: 2, Heads: 8, KVHeads: 1, Vocab: 2048, ContextLen: 128},
		{Name: "qwen2", Dim: 256, Hidden: 512, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 2048, ContextLen: 128, Arch: "qwen2"},
	}
	for _, s := range shapes {
		t.Run(s.Name, func(t *testing.T) {
			cm, err := convert.Random(s, 3)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), s.Name+".gguf")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := convert.WriteGGUF(f, cm, tensor.F32); err != nil {
				t.Fatal(err)
			}
			f.Close()
			const prompt, n = "Once upon a time, there was a little girl", 16
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ref, err := peer.Generate(ctx, path, prompt, n, 1)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Open(path, "")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := m.Tokenizer.Encode(prompt, true)
			if fmt.Sprint(ids) != fmt.Sprint(ref.PromptTokens) {
				t.Fatalf("prompt ids %v, llama.cpp %v", ids, ref.PromptTokens)
			}
			pool := kernels.NewPool(1)
			defer pool.Close()
			var got []int
			if _, err := m.NewRunner(pool, 64, 0).Generate(ids, model.NewDenseCache(&m.Config, len(ids)+n), n, sample.New(sample.Params{}), func(tok int) bool {
				got = append(got, tok)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(ref.Tokens) {
				t.Fatalf("greedy ids differ from llama.cpp:\n bulkhead  %v\n llama.cpp %v", got, ref.Tokens)
			}
		})
	}
}
