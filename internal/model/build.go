package model

import (
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// tensorsPerLayer is the fewest tensors one layer has: two norms and seven
// matrices.
const tensorsPerLayer = 9

// Build assembles a Model from a config, tensors named as in GGUF
// (token_embd.weight, blk.N.attn_q.weight, ...) and a tokenizer. Every
// tensor's shape and type is checked against the config, so a file whose
// weights disagree with its metadata fails here with the tensor's name
// instead of producing garbage later.
func Build(cfg Config, tensors []tensor.Tensor, tok *tokenizer.Tokenizer) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tok != nil && tok.VocabSize() != cfg.Vocab {
		return nil, fmt.Errorf("tokenizer has %d tokens, model has a vocabulary of %d", tok.VocabSize(), cfg.Vocab)
	}
	// The layer count comes from the file; check it against the tensors
	// before allocating anything per layer.
	if cfg.Layers > len(tensors)/tensorsPerLayer {
		return nil, fmt.Errorf("model config has %d layers, but there are only %d tensors (each layer needs %d)",
			cfg.Layers, len(tensors), tensorsPerLayer)
	}
	byName := make(map[string]*tensor.Tensor, len(tensors))
	for i := range tensors {
		byName[tensors[i].Name] = &tensors[i]
	}
	used := make(map[string]bool)
	get := func(name string) (*tensor.Tensor, error) {
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is missing", name)
		}
		used[name] = true
		return t, nil
	}
	var err error
	mat := func(name string, rows, cols int) (m kernels.Matrix) {
		if err != nil {
			return m
		}
		var t *tensor.Tensor
		if t, err = get(name); err == nil {
			m, err = matrix(t, rows, cols)
		}
		return m
	}
	vec := func(name string, n int, optional bool) []float32 {
		if err != nil {
			return nil
		}
		if _, ok := byName[name]; !ok && optional {
			return nil
		}
		t, e := get(name)
		if e != nil {
			err = e
			return nil
		}
		v, e := vector(t, n)
		if e != nil {
			err = e
			return nil
		}
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				err = fmt.Errorf("tensor %q holds %v at index %d", name, x, i)
				return nil
			}
		}
		return v
	}

	D, H, KVD, V := cfg.Dim, cfg.Hidden, cfg.KVDim(), cfg.Vocab
	QD := cfg.Heads * cfg.HeadDim
	m := &Model{Config: cfg, Tokenizer: tok}
	m.Embed = mat("token_embd.weight", V, D)
	m.WeightType = m.Embed.Type
	m.Layers = make([]Layer, cfg.Layers)
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.AttnNorm = vec(p+"attn_norm.weight", D, false)
		l.Q = mat(p+"attn_q.weight", QD, D)
		l.K = mat(p+"attn_k.weight", KVD, D)
		l.V = mat(p+"attn_v.weight", KVD, D)
		l.O = mat(p+"attn_output.weight", D, QD)
		if cfg.QKVBias {
			l.QBias = vec(p+"attn_q.bias", QD, false)
			l.KBias = vec(p+"attn_k.bias", KVD, false)
			l.VBias = vec(p+"attn_v.bias", KVD, false)
		}
		l.FFNNorm = vec(p+"ffn_norm.weight", D, false)
		l.Gate = mat(p+"ffn_gate.weight", H, D)
		l.Up = mat(p+"ffn_up.weight", H, D)
		l.Down = mat(p+"ffn_down.weight", D, H)
		if i == 0 && err == nil {
			m.WeightType = l.Q.Type
		}
	}
	m.OutNorm = vec("output_norm.weight", D, false)
	if _, ok := byName["output.weight"]; ok {
		m.Output = mat("output.weight", V, D)
		m.Config.TiedOutput = false
	} else {
		m.Output = m.Embed
		m.Config.TiedOutput = true
	}
	if f := vec("rope_freqs.weight", cfg.RopeDim/2, true); f != nil {
		m.Config.RopeFreqFactors = f
	}
	if err != nil {
		return nil, err
	}
	for name := range byName {
		if !used[name] {
			return nil, fmt.Errorf("tensor %q is not part of a %s model with this configuration", name, cfg.Arch)
		}
	}
	return m, nil
}
