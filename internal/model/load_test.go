package model_test

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// tinyGGUF writes a one-layer random llama model as GGUF with its metadata
// passed through edit first, and parses it back.
func tinyGGUF(t *testing.T, edit func([]gguf.KV) []gguf.KV) *gguf.File {
	t.Helper()
	cm, err := convert.Random(convert.Shape{Name: "tiny", Dim: 64, Hidden: 96, Layers: 1, Heads: 4, KVHeads: 2, Vocab: 512, ContextLen: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	kvs := convert.Metadata(cm, 0)
	if edit != nil {
		kvs = edit(kvs)
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, cm.Tensors); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// set replaces key's value, or appends the key.
func set(kvs []gguf.KV, key string, v any) []gguf.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i].Value = v
			return kvs
		}
	}
	return append(kvs, gguf.KV{Key: key, Value: v})
}

func TestGGUFConfigTinyLoads(t *testing.T) {
	m, err := model.FromGGUF(tinyGGUF(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.Layers != 1 || c.Heads != 4 || c.KVHeads != 2 || c.HeadDim != 16 || c.RopeDim != 16 || c.RopeScale != 1 || !c.TiedOutput {
		t.Errorf("config %+v", c)
	}
}

// TestGGUFRopeScaling follows llama.cpp's loader (llama-model.cpp): the
// scaling type defaults to "linear" when absent, the factor comes from
// rope.scaling.factor or else the older rope.scale_linear, a missing or zero
// factor means none, and type "none" ignores any factor.
func TestGGUFRopeScaling(t *testing.T) {
	for _, tc := range []struct {
		name string
		kvs  map[string]any
		want float64
	}{
		{"none given", nil, 1},
		{"factor without type", map[string]any{"llama.rope.scaling.factor": float32(4)}, 4},
		{"old scale_linear key", map[string]any{"llama.rope.scale_linear": float32(2)}, 2},
		{"factor wins over scale_linear", map[string]any{"llama.rope.scaling.factor": float32(4), "llama.rope.scale_linear": float32(2)}, 4},
		{"linear with factor", map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(8)}, 8},
		{"linear without factor", map[string]any{"llama.rope.scaling.type": "linear"}, 1},
		{"zero factor", map[string]any{"llama.rope.scaling.factor": float32(0)}, 1},
		{"type none ignores factor", map[string]any{"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": float32(4)}, 1},
	} {
		f := tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV {
			for k, v := range tc.kvs {
				kvs = set(kvs, k, v)
			}
			return kvs
		})
		cfg, err := model.GGUFConfig(f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if cfg.RopeScale != tc.want {
			t.Errorf("%s: RoPE scale %g, want %g", tc.name, cfg.RopeScale, tc.want)
		}
	}
}

// A scaling type of the wrong kind is an error naming the key, not a
// silently unscaled model.
func TestGGUFRopeScalingTypeWrongKind(t *testing.T) {
	f := tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV {
		return set(set(kvs, "llama.rope.scaling.type", uint32(1)), "llama.rope.scaling.factor", float32(4))
	})
	_, err := model.GGUFConfig(f)
	if err == nil || !strings.Contains(err.Error(), "llama.rope.scaling.type") {
		t.Fatalf("GGUFConfig = %v, want an error naming llama.rope.scaling.type", err)
	}
}

// Non-finite RoPE and norm parameters would turn every logit into NaN
// without an error; Validate must refuse them.
func TestValidateRejectsNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name string
		edit func(*model.Config)
	}{
		{"theta NaN", func(c *model.Config) { c.RopeTheta = nan }},
		{"theta Inf", func(c *model.Config) { c.RopeTheta = inf }},
		{"scale NaN", func(c *model.Config) { c.RopeScale = nan }},
		{"scale Inf", func(c *model.Config) { c.RopeScale = inf }},
		{"eps Inf", func(c *model.Config) { c.NormEps = float32(inf) }},
	} {
		f := tinyGGUF(t, nil)
		cfg, err := model.GGUFConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", tc.name, cfg)
		}
	}
	f := tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV { return set(kvs, "llama.rope.freq_base", float32(nan)) })
	if _, err := model.FromGGUF(f); err == nil {
		t.Error("FromGGUF accepted a NaN llama.rope.freq_base")
	}
}

// TestGGUFHugeBlockCount: block_count comes from the file, and a model
// cannot have more layers than it has tensors for. A file claiming 2^20
// layers must fail at once with an error about the count, without first
// allocating a Layer for each.
func TestGGUFHugeBlockCount(t *testing.T) {
	f := tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV { return set(kvs, "llama.block_count", uint32(1<<20)) })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := model.FromGGUF(f)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "1048576 layers") {
		t.Errorf("FromGGUF = %v, want an error about 1048576 layers", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("FromGGUF allocated %d MiB before rejecting the layer count", got>>20)
	}
}

// TestGGUFEndTokens: both the end-of-turn and the end-of-message ids
// (Llama 3.1 ends a tool call with <|eom_id|>) end a generation, as EOS
// does; an id given twice counts once, and one outside the vocabulary is
// an error naming the key.
func TestGGUFEndTokens(t *testing.T) {
	m, err := model.FromGGUF(tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV {
		return set(set(kvs, "tokenizer.ggml.eot_token_id", uint32(300)), "tokenizer.ggml.eom_token_id", uint32(301))
	}))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[int]bool{300: true, 301: true, 302: false} {
		if got := m.IsEnd(tok); got != want {
			t.Errorf("IsEnd(%d) = %v, want %v", tok, got, want)
		}
	}
	_, err = model.FromGGUF(tinyGGUF(t, func(kvs []gguf.KV) []gguf.KV {
		return set(kvs, "tokenizer.ggml.eom_token_id", uint32(100000))
	}))
	if err == nil || !strings.Contains(err.Error(), "tokenizer.ggml.eom_token_id") {
		t.Fatalf("eom id outside the vocabulary: %v", err)
	}
}
