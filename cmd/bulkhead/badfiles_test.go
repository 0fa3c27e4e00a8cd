package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
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
	}
	for _, args := range cases {
		if _, errOut, code := runCLI(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
}
