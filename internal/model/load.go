package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// Default loads the embedded stories260K model.
func Default() (*Model, error) {
	m, err := FromLlama2C(embedded.Name, embedded.Checkpoint, embedded.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("embedded model: %w", err)
	}
	return m, nil
}

// Open loads a model file: GGUF (detected by its magic) or a llama2.c
// checkpoint, which needs tokenizerPath. An empty path loads the embedded
// default model.
func Open(path, tokenizerPath string) (*Model, error) {
	if path == "" {
		if tokenizerPath != "" {
			return nil, fmt.Errorf("--tokenizer given without --model")
		}
		return Default()
	}
	head := make([]byte, 4)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	_, rerr := f.ReadAt(head, 0)
	before, serr := f.Stat()
	f.Close()
	if serr != nil {
		return nil, fmt.Errorf("model: %w", serr)
	}
	m, err := open(path, tokenizerPath, rerr == nil && bytes.Equal(head, []byte("GGUF")))
	if err != nil {
		return nil, err
	}
	// Stamped as it was before the mapping: a file written while it was
	// being loaded fails here, or at the server's first CheckFile.
	if err := m.watchFile(path, before); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// open loads the model file at path, GGUF or a llama2.c checkpoint.
func open(path, tokenizerPath string, isGGUF bool) (*Model, error) {
	if isGGUF {
		if tokenizerPath != "" {
			return nil, fmt.Errorf("model %s: GGUF files carry their own tokenizer; drop --tokenizer", path)
		}
		g, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		m, err := FromGGUF(g)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("model %s: %w", path, err)
		}
		m.mapping = g.Mapping()
		return m, nil
	}
	if tokenizerPath == "" {
		return nil, fmt.Errorf("model %s: not a GGUF file, and a llama2.c checkpoint needs --tokenizer", path)
	}
	tok, err := os.ReadFile(tokenizerPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	// Mapped, as GGUF files are: the weights stay in the page cache,
	// shared and read on use, rather than copied onto the heap beside it.
	c, err := llama2c.Open(path)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	m, err := fromCheckpoint(name, path, c, tokenizerPath, tok)
	if err != nil {
		c.Close()
		return nil, err
	}
	m.closer, m.mapping = c.Close, c.Mapping()
	return m, nil
}

// FromLlama2C builds a model from a llama2.c checkpoint and tokenizer held
// in memory.
func FromLlama2C(name string, ckpt, tok []byte) (*Model, error) {
	return FromLlama2CFile(name, name, ckpt, name+" tokenizer", tok)
}

// FromLlama2CFile is FromLlama2C with the paths to name in errors.
func FromLlama2CFile(name, ckptPath string, ckpt []byte, tokPath string, tok []byte) (*Model, error) {
	c, err := llama2c.Parse(ckptPath, ckpt)
	if err != nil {
		return nil, err
	}
	return fromCheckpoint(name, ckptPath, c, tokPath, tok)
}

// fromCheckpoint builds a model over a parsed checkpoint, whose tensors it
// keeps; ckptPath and tokPath name the files in errors.
func fromCheckpoint(name, ckptPath string, c *llama2c.Checkpoint, tokPath string, tok []byte) (*Model, error) {
	t, err := tokenizer.FromLlama2C(tok, c.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", tokPath, err)
	}
	cfg := Llama2CConfig(c.Header)
	m, err := Build(cfg, c.Tensors, t)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", ckptPath, err)
	}
	m.Name = name
	return m, nil
}

// Llama2CConfig is the model configuration a llama2.c header implies: Meta's
// Llama layout with RoPE theta 10000 on adjacent pairs and RMSNorm eps 1e-5.
func Llama2CConfig(h llama2c.Header) Config {
	return Config{
		Arch: "llama", Dim: h.Dim, Hidden: h.Hidden, Layers: h.Layers, Heads: h.Heads,
		KVHeads: h.KVHeads, HeadDim: h.HeadDim(), Vocab: h.Vocab, ContextLen: h.SeqLen,
		RopeTheta: 10000, RopeStyle: RopeAdjacent, RopeDim: h.HeadDim(), RopeScale: 1,
		NormEps: 1e-5, TiedOutput: h.SharedClassifier,
	}
}

// FromGGUF builds a model over an open GGUF file. The model takes ownership
// of f and closes it in Close.
func FromGGUF(f *gguf.File) (*Model, error) {
	cfg, err := GGUFConfig(f)
	if err != nil {
		return nil, err
	}
	tok, err := GGUFTokenizer(f)
	if err != nil {
		return nil, err
	}
	if cfg.Vocab == 0 {
		cfg.Vocab = tok.VocabSize()
	}
	m, err := Build(cfg, f.Tensors, tok)
	if err != nil {
		return nil, err
	}
	if name, err := f.String("general.name"); err == nil && name != "" {
		m.Name = name
	} else if f.Path != "" {
		m.Name = strings.TrimSuffix(filepath.Base(f.Path), filepath.Ext(f.Path))
	}
	if tmpl, err := f.String("tokenizer.chat_template"); err == nil {
		m.ChatTemplate = tmpl
	}
	m.closer = f.Close
	return m, nil
}

// GGUFConfig reads the architecture from GGUF metadata.
func GGUFConfig(f *gguf.File) (Config, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Arch: arch, RopeScale: 1}
	switch arch {
	case "llama":
		cfg.RopeStyle = RopeAdjacent
	case "qwen2":
		cfg.RopeStyle = RopeHalf
		cfg.QKVBias = true
	default:
		return Config{}, fmt.Errorf("architecture %q is not supported (supported: llama, qwen2)", arch)
	}
	var firstErr error
	need := func(key string) int {
		v, err := f.Uint(arch + "." + key)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if v > 1<<31 && firstErr == nil {
			firstErr = fmt.Errorf("gguf key %s.%s = %d is out of range", arch, key, v)
		}
		return int(v)
	}
	optional := func(key string, def int) int {
		if _, ok := f.Get(arch + "." + key); !ok {
			return def
		}
		return need(key)
	}
	cfg.ContextLen = need("context_length")
	cfg.Dim = need("embedding_length")
	cfg.Layers = need("block_count")
	cfg.Hidden = need("feed_forward_length")
	cfg.Heads = need("attention.head_count")
	cfg.KVHeads = optional("attention.head_count_kv", cfg.Heads)
	if firstErr != nil {
		return Config{}, firstErr
	}
	if cfg.Heads <= 0 {
		return Config{}, fmt.Errorf("gguf key %s.attention.head_count = %d must be positive", arch, cfg.Heads)
	}
	cfg.HeadDim = optional("attention.key_length", cfg.Dim/cfg.Heads)
	cfg.RopeDim = optional("rope.dimension_count", cfg.HeadDim)
	cfg.RopeTheta = 10000
	if _, ok := f.Get(arch + ".rope.freq_base"); ok {
		if cfg.RopeTheta, err = f.Float(arch + ".rope.freq_base"); err != nil {
			return Config{}, err
		}
	}
	eps, err := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		return Config{}, err
	}
	cfg.NormEps = float32(eps)
	if cfg.RopeScale, err = ggufRopeScale(f, arch); err != nil {
		return Config{}, err
	}
	if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Shape) == 2 {
		cfg.Vocab = t.Shape[1]
	}
	if _, ok := f.Get(arch + ".vocab_size"); ok {
		cfg.Vocab = need("vocab_size")
	}
	if firstErr != nil {
		return Config{}, firstErr
	}
	return cfg, nil
}

// ggufRopeScale reads linear RoPE scaling as llama.cpp does: the type
// (rope.scaling.type) defaults to "linear" when absent, the factor comes
// from rope.scaling.factor or else the older rope.scale_linear, and a
// missing or zero factor, or type "none", means no scaling.
func ggufRopeScale(f *gguf.File, arch string) (float64, error) {
	typ := "linear"
	if _, ok := f.Get(arch + ".rope.scaling.type"); ok {
		var err error
		if typ, err = f.String(arch + ".rope.scaling.type"); err != nil {
			return 0, err
		}
	}
	factor := 0.0
	for _, key := range []string{arch + ".rope.scaling.factor", arch + ".rope.scale_linear"} {
		if _, ok := f.Get(key); ok {
			var err error
			if factor, err = f.Float(key); err != nil {
				return 0, err
			}
			break
		}
	}
	switch typ {
	case "none", "":
		return 1, nil
	case "linear":
		if factor == 0 {
			return 1, nil
		}
		return factor, nil
	}
	return 0, fmt.Errorf("gguf key %s.rope.scaling.type: RoPE scaling type %q is not supported (supported: none, linear, and Llama 3 frequency factors)", arch, typ)
}

// GGUFTokenizer builds the tokenizer from tokenizer.ggml.* metadata.
func GGUFTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	s := tokenizer.Spec{BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	var err error
	if s.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return nil, err
	}
	if s.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	if _, ok := f.Get("tokenizer.ggml.scores"); ok {
		if s.Scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, err
		}
	}
	if _, ok := f.Get("tokenizer.ggml.token_type"); ok {
		if s.Types, err = f.Int32s("tokenizer.ggml.token_type"); err != nil {
			return nil, err
		}
	}
	if _, ok := f.Get("tokenizer.ggml.merges"); ok {
		if s.Merges, err = f.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, err
		}
	}
	if pre, err := f.String("tokenizer.ggml.pre"); err == nil {
		s.Pre = pre
	}
	id := func(key string, dst *int) error {
		if _, ok := f.Get(key); !ok {
			return nil
		}
		v, err := f.Uint(key)
		if err != nil {
			return err
		}
		if v >= uint64(len(s.Tokens)) {
			return fmt.Errorf("gguf key %s = %d is outside the vocabulary of %d", key, v, len(s.Tokens))
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
	}{{"tokenizer.ggml.bos_token_id", &s.BOS}, {"tokenizer.ggml.eos_token_id", &s.EOS}, {"tokenizer.ggml.unknown_token_id", &s.UNK}, {"tokenizer.ggml.padding_token_id", &s.PAD}} {
		if err := id(k.key, k.dst); err != nil {
			return nil, err
		}
	}
	// End of turn and, for Llama 3.1's tool calls, end of message: either
	// ends a generation, as EOS does.
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		end := -1
		if err := id(key, &end); err != nil {
			return nil, err
		}
		if end >= 0 && !slices.Contains(s.EOT, end) {
			s.EOT = append(s.EOT, end)
		}
	}
	s.AddBOS = s.Model == "llama"
	if v, ok := f.Get("tokenizer.ggml.add_bos_token"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, fmt.Errorf("gguf key tokenizer.ggml.add_bos_token is %T, want bool", v)
		}
		s.AddBOS = b
	}
	s.AddSpacePrefix = s.Model == "llama"
	if v, ok := f.Get("tokenizer.ggml.add_space_prefix"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, fmt.Errorf("gguf key tokenizer.ggml.add_space_prefix is %T, want bool", v)
		}
		s.AddSpacePrefix = b
	}
	// tokenizer.New's errors say "tokenizer:" already.
	return tokenizer.New(s)
}
