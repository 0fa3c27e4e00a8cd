package kv

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// TestF16PoolLayout checks that an f16 pool stores two elements per word:
// half the memory of f32 for the same pages, spans and copies in words,
// and every span saying its type so attention picks the right kernel.
func TestF16PoolLayout(t *testing.T) {
	cfg := PoolConfig{Pages: 3, PageSize: 4, Layers: 2, KVDim: 6, Type: model.KVF16}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f32 := cfg
	f32.Type = model.KVF32
	if cfg.RowWords() != 3 || f32.RowWords() != 6 || 2*cfg.Bytes() != f32.Bytes() || int64(len(p.k)+len(p.v))*4 != cfg.Bytes() {
		t.Fatalf("f16 pool: %d words per row, %d bytes (f32: %d words, %d bytes), %d words allocated",
			cfg.RowWords(), cfg.Bytes(), f32.RowWords(), f32.Bytes(), len(p.k)+len(p.v))
	}
	s, err := p.Alloc(Owner{"a", 1}, 6)
	if err != nil {
		t.Fatal(err)
	}
	if s.KVType() != model.KVF16 {
		t.Fatalf("Seq.KVType = %v, want f16", s.KVType())
	}
	// Write six tokens of binary16 words through WriteTokens, read them back
	// through ReadTokens and through Spans.
	k := make([]float32, 6*3)
	v := make([]float32, 6*3)
	for i := range k {
		lo, hi := tensor.F32ToF16(float32(i)+0.5), tensor.F32ToF16(-float32(i))
		k[i] = math.Float32frombits(uint32(hi)<<16 | uint32(lo))
		v[i] = math.Float32frombits(uint32(lo)<<16 | uint32(hi))
	}
	for l := range 2 {
		if err := s.WriteTokens(l, 0, 6, k, v); err != nil {
			t.Fatal(err)
		}
		gk, gv := make([]float32, len(k)), make([]float32, len(v))
		if err := s.ReadTokens(l, 0, 6, gk, gv); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(bitsOf(gk), bitsOf(k)) || !slices.Equal(bitsOf(gv), bitsOf(v)) {
			t.Fatalf("layer %d: words read back differ from the words written", l)
		}
		spans, err := s.Spans(nil, l, 6)
		if err != nil {
			t.Fatal(err)
		}
		var all []float32
		for _, sp := range spans {
			if sp.Type != model.KVF16 {
				t.Fatalf("span of an f16 pool says %v", sp.Type)
			}
			all = append(all, sp.K...)
		}
		if len(spans) != 2 || spans[0].Tokens(6) != 4 || spans[1].Tokens(6) != 2 || !slices.Equal(bitsOf(all), bitsOf(k)) {
			t.Fatalf("layer %d: spans of 4+2 tokens expected, got %d spans, words equal: %v", l, len(spans), slices.Equal(bitsOf(all), bitsOf(k)))
		}
	}
	if err := s.ReadTokens(0, 0, 6, make([]float32, 6*6-1), make([]float32, 6*6)); err != nil {
		// Buffers sized in f32 elements are larger than needed: fine.
		t.Fatal(err)
	}
	if err := s.ReadTokens(0, 0, 6, make([]float32, 6*3-1), make([]float32, 6*3)); !errors.Is(err, ErrRange) {
		t.Fatalf("short buffer: %v, want ErrRange", err)
	}
	// A freed f16 page is poisoned word by word; the upper half of every
	// word is a binary16 NaN, so a stale f16 read still poisons attention.
	s.Free()
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
	if req, ok := PoisonRequest(p.k[5:]); !ok || req != 1 {
		t.Fatalf("PoisonRequest on an f16 page = %d, %v; want 1, true", req, ok)
	}
	for i, w := range p.v[:p.pageLen] {
		if hi := uint16(math.Float32bits(w) >> 16); hi&0x7c00 != 0x7c00 || hi&0x3ff == 0 {
			t.Fatalf("poisoned f16 word %d: upper half %#04x is not a binary16 NaN", i, hi)
		}
	}
}

func TestF16PoolRefusesOddRows(t *testing.T) {
	_, err := NewPool(PoolConfig{Pages: 1, PageSize: 4, Layers: 1, KVDim: 5, Type: model.KVF16})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("f16 pool with KV dimension 5: %v, want ErrConfig", err)
	}
}

func bitsOf(f []float32) []uint32 {
	b := make([]uint32, len(f))
	for i, x := range f {
		b[i] = math.Float32bits(x)
	}
	return b
}
