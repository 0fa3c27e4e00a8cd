package convert

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// Shape is a named model shape for random-weight benchmark models.
type Shape struct {
	Name                                                   string
	Dim, Hidden, Layers, Heads, KVHeads, Vocab, ContextLen int
	// Arch is "llama" (the default when empty) or "qwen2" (attention
	// biases, rotate-half RoPE).
	Arch string
}

// Shapes are the benchmark shapes: the published sizes of llama2.c's
// stories models and TinyLlama's 1.1B GQA layout.
//
// "2M" is the smallest shape whose matrices K-quants can hold whole (every
// row length a multiple of 256); tests use it to check Q4_K and Q6_K files
// against llama.cpp.
var Shapes = map[string]Shape{
	"2M":   {"2M", 256, 768, 2, 4, 4, 512, 256, ""},
	"15M":  {"15M", 288, 768, 6, 6, 6, 32000, 256, ""},
	"110M": {"110M", 768, 2048, 12, 12, 12, 32000, 1024, ""},
	"1.1B": {"1.1B", 2048, 5632, 22, 32, 4, 32000, 2048, ""},
}

// ShapeNames lists the shapes in size order, for help text.
func ShapeNames() string {
	var names []string
	for n := range Shapes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return Shapes[names[i]].Dim < Shapes[names[j]].Dim })
	return strings.Join(names, ", ")
}

// Random describes a model of shape s with pseudo-random weights drawn from
// seed. Its output is meaningless, but it costs exactly what a trained model
// of that shape costs to run, which is what benchmarks need. The tokenizer is
// the embedded 512-piece vocabulary padded to s.Vocab with ordinary pieces
// that prompts cannot reach (a private-use character and a number), so that
// every token a random model samples shows as text: a stream's first token
// is then its first text, as with a trained model, and load tests measure
// time to first token rather than time to the first token with text.
func Random(s Shape, seed uint64) (*Model, error) {
	base, err := tokenizer.FromLlama2C(embedded.Tokenizer, 512)
	if err != nil {
		return nil, err
	}
	spec := base.Spec()
	if s.Vocab < len(spec.Tokens) {
		return nil, fmt.Errorf("convert: shape %s has a vocabulary of %d, below the base tokenizer's %d", s.Name, s.Vocab, len(spec.Tokens))
	}
	for i := len(spec.Tokens); i < s.Vocab; i++ {
		spec.Tokens = append(spec.Tokens, fmt.Sprintf("\ue000%d", i))
		spec.Scores = append(spec.Scores, -1e9)
		spec.Types = append(spec.Types, 1) // normal
	}
	hd := s.Dim / s.Heads
	arch := s.Arch
	if arch == "" {
		arch = "llama"
	}
	cfg := model.Config{
		Arch: arch, Dim: s.Dim, Hidden: s.Hidden, Layers: s.Layers, Heads: s.Heads,
		KVHeads: s.KVHeads, HeadDim: hd, Vocab: s.Vocab, ContextLen: s.ContextLen,
		RopeTheta: 10000, RopeDim: hd, RopeScale: 1, NormEps: 1e-5, TiedOutput: true,
	}
	switch arch {
	case "llama":
	case "qwen2":
		cfg.RopeStyle, cfg.QKVBias, cfg.RopeTheta = model.RopeHalf, true, 1000000
	default:
		return nil, fmt.Errorf("convert: no random generator for architecture %q", arch)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := rng{state: seed*0x9e3779b97f4a7c15 + 1}
	m := &Model{Name: "random-" + s.Name, Config: cfg, Tokenizer: spec}
	if cfg.Arch != "llama" {
		m.Name += "-" + cfg.Arch
	}
	add := func(name string, shape ...int) {
		n := shape[0]
		if len(shape) > 1 {
			n *= shape[1]
		}
		data := make([]byte, 4*n)
		if strings.HasSuffix(name, ".bias") {
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(0.1*g.float()))
			}
		} else if len(shape) == 1 {
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
			}
		} else {
			// Uniform with variance 1/cols keeps activations in a sane range.
			a := float32(math.Sqrt(3 / float64(shape[0])))
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(a*g.float()))
			}
		}
		m.Tensors = append(m.Tensors, tensor.Tensor{Name: name, Type: tensor.F32, Shape: shape, Data: data})
	}
	kvd := cfg.KVDim()
	add("token_embd.weight", s.Dim, s.Vocab)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", s.Dim)
		add(p+"attn_q.weight", s.Dim, s.Dim)
		add(p+"attn_k.weight", s.Dim, kvd)
		add(p+"attn_v.weight", s.Dim, kvd)
		if cfg.QKVBias {
			add(p+"attn_q.bias", s.Dim)
			add(p+"attn_k.bias", kvd)
			add(p+"attn_v.bias", kvd)
		}
		add(p+"attn_output.weight", s.Dim, s.Dim)
		add(p+"ffn_norm.weight", s.Dim)
		add(p+"ffn_gate.weight", s.Dim, s.Hidden)
		add(p+"ffn_down.weight", s.Hidden, s.Dim)
		add(p+"ffn_up.weight", s.Dim, s.Hidden)
	}
	add("output_norm.weight", s.Dim)
	return m, nil
}

// rng is a small xorshift generator: fast enough to fill a billion weights
// in seconds, and stable across Go releases so a seed always names the same
// model.
type rng struct{ state uint64 }

// float returns a value uniform in [-1, 1).
func (r *rng) float() float32 {
	r.state ^= r.state << 13
	r.state ^= r.state >> 7
	r.state ^= r.state << 17
	return float32(int32(r.state>>32)) / (1 << 31)
}
