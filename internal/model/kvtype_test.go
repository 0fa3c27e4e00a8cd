package model_test

import (
	"math"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// TestF16KVTracksF32 runs the shipped model over the same tokens with an
// f32 and an f16 cache. The f16 cache must really round (some logit
// differs: the test would pass vacuously if f16 storage silently kept
// float32), yet stay close: the same most likely token nearly everywhere
// and small logit errors, which a misread layout (wrong stride, swapped
// halves, a lost tail) would blow far past.
func TestF16KVTracksF32(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	toks := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.", true)
	pool := kernels.NewPool(1)
	defer pool.Close()
	f32 := logitsAlone(t, m, pool, toks, model.KVF32)
	f16 := logitsAlone(t, m, pool, toks, model.KVF16)
	differ, agree := false, 0
	var worst float64
	for i := range toks {
		a, b := f32[i], f16[i]
		span := 0.0
		for j := range a {
			span = max(span, math.Abs(float64(a[j])))
			if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
				differ = true
			}
		}
		for j := range a {
			worst = max(worst, math.Abs(float64(a[j]-b[j]))/span)
		}
		if sample.Greedy(a) == sample.Greedy(b) {
			agree++
		}
	}
	if !differ {
		t.Fatal("f16 KV gave bit-identical logits to f32 at every position: the f16 path was not taken")
	}
	if worst > 0.02 {
		t.Errorf("f16 KV moved a logit by %.3g of the largest logit; want under 0.02", worst)
	}
	if agree < len(toks)*9/10 {
		t.Errorf("f16 KV picked the same next token as f32 at %d of %d positions; want at least 90%%", agree, len(toks))
	}
	t.Logf("%d positions: worst logit error %.2g of the largest logit, same argmax at %d", len(toks), worst, agree)
}

// TestF16KVStorage checks what an f16 cache holds: each key is the f32
// key rounded to binary16, two to a storage word.
func TestF16KVStorage(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(1)
	defer pool.Close()
	r := m.NewRunner(pool, 4, 0)
	d32 := model.NewDenseCache(&m.Config, 4)
	d16, err := model.NewDenseCacheOf(&m.Config, 4, model.KVF16)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []model.SeqCache{d32, d16} {
		s := &model.Seq{Tokens: []int{1, 400, 90}, Cache: c, Logits: make([]float32, m.Config.Vocab)}
		if err := r.Forward([]*model.Seq{s}); err != nil {
			t.Fatal(err)
		}
	}
	kvd := m.Config.KVDim()
	// Only layer 0's keys and values are the same computation in both
	// caches: from layer 1 on, the inputs carry f16 attention's rounding.
	for l := 0; l < 1; l++ {
		s32, _ := d32.Spans(nil, l, 3)
		s16, _ := d16.Spans(nil, l, 3)
		if len(s16[0].K) != 3*kvd/2 || s16[0].Type != model.KVF16 || s16[0].Tokens(kvd) != 3 {
			t.Fatalf("layer %d: f16 span holds %d words of type %v, want %d words for 3 tokens", l, len(s16[0].K), s16[0].Type, 3*kvd/2)
		}
		for _, kv := range [][2][]float32{{s32[0].K, s16[0].K}, {s32[0].V, s16[0].V}} {
			for i, x := range kv[0] {
				w := math.Float32bits(kv[1][i/2])
				h := uint16(w >> (16 * (i % 2)))
				if h != tensor.F32ToF16(x) {
					t.Fatalf("layer %d element %d: stored %#04x, want %#04x (binary16 of %v)", l, i, h, tensor.F32ToF16(x), x)
				}
			}
		}
	}
}

func TestParseKVType(t *testing.T) {
	for in, want := range map[string]model.KVType{"": model.KVF32, "f32": model.KVF32, "f16": model.KVF16} {
		if got, err := model.ParseKVType(in); err != nil || got != want {
			t.Errorf("ParseKVType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := model.ParseKVType("q8_0"); err == nil || !strings.Contains(err.Error(), `"q8_0"`) {
		t.Errorf("ParseKVType(q8_0) error %v; want one naming the value", err)
	}
	odd := model.Config{Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 3, Dim: 3}
	if _, err := model.NewDenseCacheOf(&odd, 4, model.KVF16); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("f16 cache for KV dimension 3: error %v; want one saying it must be even", err)
	}
}
