package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/openai/openai-go/v3"
)

// TestBadModelFiles: every broken file gets a clear error that names the
// file and the problem, and a non-zero exit; none panics.
func TestBadModelFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, err := os.ReadFile(convertEmbedded(t, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	tok := write("tok.bin", embedded.Tokenizer)

	// A GGUF whose architecture Bulkhead does not know.
	cm, err := convert.Random(convert.Shape{Name: "t", Dim: 64, Hidden: 64, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 512, ContextLen: 32}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cm.Config.Arch = "gptneox"
	if err := convert.WriteGGUF(&buf, cm, 0); err != nil {
		t.Fatal(err)
	}
	unknownArch := write("arch.gguf", buf.Bytes())

	// A GGUF whose metadata says a wider model than its tensors hold.
	f, err := gguf.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.KVs {
		if f.KVs[i].Key == "llama.embedding_length" {
			f.KVs[i].Value = uint32(128)
		}
	}
	buf.Reset()
	if err := gguf.Write(&buf, f.KVs, f.Tensors); err != nil {
		t.Fatal(err)
	}
	wrongShape := write("shape.gguf", buf.Bytes())

	ckpt := embedded.Checkpoint
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"missing file", []string{"--model", filepath.Join(dir, "nope.gguf")}, []string{"nope.gguf", "no such file"}},
		{"wrong magic, no tokenizer", []string{"--model", write("junk.bin", []byte("this is not a model file at all"))}, []string{"junk.bin", "not a GGUF file"}},
		{"truncated gguf", []string{"--model", write("trunc.gguf", good[:len(good)/2])}, []string{"trunc.gguf", "data ends at"}},
		{"gguf header only", []string{"--model", write("hdr.gguf", good[:10])}, []string{"hdr.gguf"}},
		{"unknown architecture", []string{"--model", unknownArch}, []string{"arch.gguf", `"gptneox" is not supported`}},
		{"shape mismatch", []string{"--model", wrongShape}, []string{"shape.gguf", "token_embd.weight", "shape"}},
		{"truncated llama2c", []string{"--model", write("short.bin", ckpt[:len(ckpt)-100]), "--tokenizer", tok}, []string{"short.bin", "end"}},
		{"llama2c with junk header", []string{"--model", write("hdr.bin", append([]byte{0xff, 0xff, 0xff, 0x7f}, ckpt[4:]...)), "--tokenizer", tok}, []string{"hdr.bin", "dim"}},
		{"tokenizer truncated", []string{"--model", write("ok.bin", ckpt), "--tokenizer", write("tok-short.bin", embedded.Tokenizer[:100])}, []string{"tok-short.bin"}},
		{"tokenizer with gguf", []string{"--model", write("good.gguf", good), "--tokenizer", tok}, []string{"carry their own tokenizer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"generate", "--prompt", "Once", "--max-tokens", "3"}, c.args...)
			out, errOut, code := runCLI(t, args...)
			if code == 0 {
				t.Fatalf("exit 0 with output %q", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not mention %q", errOut, w)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cases := [][]string{
		{"generate"}, // no prompt
		{"generate", "--prompt", "x", "--max-tokens", "0"},
		{"generate", "--prompt", "x", "--max-tokens", "600"}, // beyond the 512-token context
		{"generate", "--prompt", "x", "--temperature", "-1"},
		{"generate", "--prompt", "x", "stray"},
		{"generate", "--prompt", "x", "--kv-dtype", "q8_0"},
		{"convert", "--type", "q8_k", "--out", "x.gguf"},
		{"convert", "--random", "7B", "--out", "x.gguf"},
		{"nosuchcommand"},
		// Sums that overflow must not slip past the context check.
		{"generate", "--prompt", "x", "--max-tokens", "9223372036854775807"},
		{"bench", "model", "--reps", "1", "--prompt-tokens", "8", "--gen-tokens", "9223372036854775807"},
		// A config that loadgen refuses is a usage error, and a
		// temperature with no JSON form must not crash the workers.
		{"bench", "load", "--target", "http://127.0.0.1:1", "--model", "m", "--requests", "0"},
		{"bench", "load", "--target", "http://127.0.0.1:1", "--model", "m", "--requests", "1", "--concurrency", "1", "--temperature", "NaN"},
		{"bench", "load", "--target", "http://127.0.0.1:1", "--model", "m", "--requests", "1", "--concurrency", "1", "--temperature", "+Inf"},
		// A level above --requests could never reach its concurrency.
		{"bench", "load", "--target", "http://127.0.0.1:1", "--model", "m", "--requests", "16", "--concurrency", "1,32"},
		{"certs", "--out", filepath.Join(dir, "pki"), "--hosts", ","}, // no host at all
		{"convert", "--out", dir}, // a directory: refused before converting
		{"license", "stray"},
	}
	for _, args := range cases {
		if _, errOut, code := runCLI(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
	// 'bulkhead <command> -h', as the usage text suggests, is help (exit 0)
	// for every command, bench included.
	for _, args := range [][]string{{"bench", "-h"}, {"bench", "load", "-h"}, {"license", "-h"}, {"cluster", "-h"}} {
		if out, errOut, code := runCLI(t, args...); code != 0 || out+errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 0 with help", args, code, errOut)
		}
	}
}

// TestServeBoundsRecursiveTemplate: a model file whose chat template has
// a macro that calls itself for ever used to crash the whole server with a
// stack overflow at the first chat request. Now that request alone fails,
// with a 500 chat_template_limit naming the limit, and the server goes on
// serving.
func TestServeBoundsRecursiveTemplate(t *testing.T) {
	good, err := os.ReadFile(convertEmbedded(t, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	kvs := append(f.KVs, gguf.KV{Key: "tokenizer.chat_template", Value: `{% macro turn(m) %}{{ turn(m) }}{% endmacro %}{% for m in messages %}{{ turn(m) }}{% endfor %}`})
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, f.Tensors); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "recursive.gguf")
	if err := os.WriteFile(model, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBulkhead(t, "serve", "--config", writeConfig(t, fmt.Sprintf("model: %s\ncontext_len: 256\nmax_input_tokens: 200\nkv:\n  page_size: 16\n  pages: 64\n", model)))
	ctx := context.Background()
	c := p.client("")
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "stories260K",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
	})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 500 || ae.Code != "chat_template_limit" || !strings.Contains(ae.Message, "nested") {
		t.Fatalf("chat with a runaway template: %v, want 500 chat_template_limit naming the call depth", err)
	}
	if _, err := complete(ctx, p.client(""), textPrompt("Once upon a time"), 4); err != nil {
		t.Fatalf("the server did not go on serving: %v", err)
	}
}
