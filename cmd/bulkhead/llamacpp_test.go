package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peer"
)

// requirePeer skips when llama.cpp (node-llama-cpp) is not installed, except
// in CI, where its absence is a broken setup and fails the test.
func requirePeer(t *testing.T) {
	t.Helper()
	if err := peer.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("llama.cpp peer required in CI: %v", err)
		}
		t.Skipf("llama.cpp peer not installed (cd tools/node && npm ci --omit=optional --ignore-scripts): %v", err)
	}
}

// TestLlamaCppReadsConvertedGGUF: the F32 GGUF that `bulkhead convert`
// writes loads in llama.cpp, which tokenizes every golden prompt to the
// reference ids and generates the reference text byte for byte.
func TestLlamaCppReadsConvertedGGUF(t *testing.T) {
	requirePeer(t)
	path := convertEmbedded(t, "f32")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lines := loadGolden(t)
	refs := peerAll(ctx, t, path, lines, lines[0].MaxTokens+1)
	for i, g := range lines {
		if g.MaxTokens != lines[0].MaxTokens {
			t.Fatalf("golden lines ask for %d and %d tokens; this test asks llama.cpp for one count", g.MaxTokens, lines[0].MaxTokens)
		}
		res := refs[i]
		if !equalInts(res.PromptTokens, g.PromptTokens) {
			t.Errorf("llama.cpp tokenized %q as %v, want %v", g.Prompt, res.PromptTokens, g.PromptTokens)
		}
		if res.Completion != g.Completion {
			t.Errorf("llama.cpp completion of %q: %s", g.Prompt, firstDiff(res.Completion, g.Completion))
		}
	}
}

// TestLlamaCppAgreesOnQuantized compares Bulkhead and llama.cpp on the same
// F16, Q8_0 and Q4_0 files. F16 weights leave only rounding-order
// differences, so the greedy text must agree. For Q8_0 and Q4_0 weights
// both engines also quantize the activations, with different scales (a
// float32 scale and round-half-even here, an f16 scale in llama.cpp), and a
// 64-wide model amplifies that: near-ties can flip. The floors below are
// what a correct reader of each format reaches (measured: Q8_0 4 of 5,
// Q4_0 3 of 5); a misread block layout gives 0.
func TestLlamaCppAgreesOnQuantized(t *testing.T) {
	requirePeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, typ := range []string{"f16", "q8_0", "q4_0"} {
		path := convertEmbedded(t, typ)
		lines := loadGolden(t)
		refs := peerAll(ctx, t, path, lines, 20)
		same := 0
		for i, g := range lines {
			res := refs[i]
			ours, errOut, code := runCLI(t, "generate", "--model", path, "--prompt", g.Prompt, "--max-tokens", "20", "--temperature", "0")
			if code != 0 {
				t.Fatalf("bulkhead generate on %s: %s", path, errOut)
			}
			if ours == res.Completion {
				same++
			} else {
				t.Logf("%s %q: %s", typ, g.Prompt, firstDiff(ours, res.Completion))
			}
		}
		t.Logf("%s: %d of %d 20-token greedy completions identical in Bulkhead and llama.cpp", typ, same, len(lines))
		if floor := map[string]int{"f16": 5, "q8_0": 3, "q4_0": 2}[typ]; same < floor {
			t.Errorf("%s: only %d of %d completions agree with llama.cpp, want at least %d", typ, same, len(lines), floor)
		}
	}
}

// peerAll asks llama.cpp, loading path once, for a greedy maxTokens-token
// completion of every golden prompt.
func peerAll(ctx context.Context, t *testing.T, path string, lines []golden, maxTokens int) []peer.Result {
	t.Helper()
	prompts := make([]string, len(lines))
	for i, g := range lines {
		prompts[i] = g.Prompt
	}
	res, err := peer.GenerateAll(ctx, path, prompts, maxTokens, 1)
	if err != nil {
		t.Fatalf("llama.cpp on %s: %v", path, err)
	}
	return res
}
