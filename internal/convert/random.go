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
//
// Every weight is in memory (4.4 GB of float32 for the 1.1B shape);
// RandomStream writes the same file holding one tensor at a time.
func Random(s Shape, seed uint64) (*Model, error) {
	m, err := RandomStream(s, seed)
	if err != nil {
		return nil, err
	}
	for i := range m.Tensors {
		if m.Tensors[i].Data, err = m.source(i); err != nil {
			return nil, err
		}
	}
	m.source = nil
	return m, nil
}

// RandomStream is Random with the weights left out of memory: the tensors'
// Data are nil, and WriteGGUF (or any of the Write functions) draws each
// tensor's weights when it reaches it. The file is byte for byte the one
// Random's model writes. The weights come from one generator, so write the
// model from one goroutine at a time.
func RandomStream(s Shape, seed uint64) (*Model, error) {
	base, err := tokenizer.FromLlama2C(embedded.Tokenizer, 512)
	if err != nil {
		return nil, err
	}
	spec := base.Spec()
	if s.Vocab < len(spec.Tokens) {
		return nil, fmt.Errorf("convert: shape %s has a vocabulary of %d, below the base tokenizer's %d", s.Name, s.Vocab, len(spec.Tokens))
	}
	// Checked before dividing: a zero would panic, and a remainder would
	// give query and output matrices of Dim columns for heads that cover
	// fewer, which no loader accepts.
	if s.Heads <= 0 || s.Dim%s.Heads != 0 {
		return nil, fmt.Errorf("convert: shape %s: dim %d does not divide into %d heads", s.Name, s.Dim, s.Heads)
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
	m := &Model{Name: "random-" + s.Name, Config: cfg, Tokenizer: spec}
	if cfg.Arch != "llama" {
		m.Name += "-" + cfg.Arch
	}
	add := func(name string, shape ...int) {
		m.Tensors = append(m.Tensors, tensor.Tensor{Name: name, Type: tensor.F32, Shape: shape})
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
	gen := &randomWeights{tensors: m.Tensors, seed: seed}
	m.source = gen.data
	return m, nil
}

// randomWeights draws the tensors' weights from one generator, in tensor
// order, so that a seed names the same bytes however the weights are
// fetched.
type randomWeights struct {
	tensors []tensor.Tensor
	seed    uint64
	g       rng
	next    int // the tensor g's next draws belong to
}

// data returns tensor i's F32 bytes. In order it costs one pass over the
// weights; asked for an earlier tensor, it starts the generator again.
func (r *randomWeights) data(i int) ([]byte, error) {
	if i == 0 || i < r.next {
		r.g, r.next = newRNG(r.seed), 0
	}
	for ; r.next < i; r.next++ {
		r.fill(&r.tensors[r.next], nil) // advance past tensors not asked for
	}
	t := &r.tensors[i]
	data := make([]byte, 4*t.Elements())
	r.fill(t, data)
	r.next = i + 1
	return data, nil
}

// fill writes t's weights to data, or draws and drops them when data is
// nil: biases uniform in ±0.1, norm weights 1 (no draws), and matrices
// uniform with variance 1/cols, which keeps activations in a sane range.
func (r *randomWeights) fill(t *tensor.Tensor, data []byte) {
	n := t.Elements()
	var scale float32
	switch {
	case strings.HasSuffix(t.Name, ".bias"):
		scale = 0.1
	case len(t.Shape) == 1:
		for i := 0; data != nil && i < n; i++ {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
		}
		return
	default:
		scale = float32(math.Sqrt(3 / float64(t.Shape[0])))
	}
	for i := 0; i < n; i++ {
		v := scale * r.g.float()
		if data != nil {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	}
}

// rng is a small xorshift generator: fast enough to fill a billion weights
// in seconds, and stable across Go releases so a seed always names the same
// model.
type rng struct{ state uint64 }

// newRNG seeds an rng. Xorshift never leaves state 0, and one seed maps
// there (the one with seed·0x9e3779b97f4a7c15 = −1), which would make every
// weight 0; it takes another state instead. Every other seed keeps the
// state, and so the weights, it always had.
func newRNG(seed uint64) rng {
	s := seed*0x9e3779b97f4a7c15 + 1
	if s == 0 {
		s = 0x9e3779b97f4a7c15
	}
	return rng{state: s}
}

// float returns a value uniform in [-1, 1).
func (r *rng) float() float32 {
	r.state ^= r.state << 13
	r.state ^= r.state >> 7
	r.state ^= r.state << 17
	return float32(int32(r.state>>32)) / (1 << 31)
}
