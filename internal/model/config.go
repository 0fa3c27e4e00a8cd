package model

import (
	"fmt"
	"math"
)

// RopeStyle says which elements of a head RoPE rotates together.
type RopeStyle int

const (
	// RopeAdjacent rotates pairs (2i, 2i+1): Meta's Llama layout, which
	// llama2.c checkpoints and GGUF "llama" files use.
	RopeAdjacent RopeStyle = iota
	// RopeHalf rotates pairs (i, i+d/2) (GPT-NeoX style): GGUF "qwen2".
	RopeHalf
)

func (s RopeStyle) String() string {
	if s == RopeHalf {
		return "half"
	}
	return "adjacent"
}

// Config is the architecture of a decoder-only transformer of the Llama
// family, as read from a weight file.
type Config struct {
	Arch       string // "llama" or "qwen2"
	Dim        int    // embedding width
	Hidden     int    // feed-forward width
	Layers     int
	Heads      int // query heads
	KVHeads    int // key/value heads (GQA when fewer than Heads)
	HeadDim    int
	Vocab      int
	ContextLen int // the longest sequence the model was trained for

	RopeTheta float64
	RopeStyle RopeStyle
	// RopeDim is how many leading elements of each head RoPE rotates
	// (HeadDim for every model supported today).
	RopeDim int
	// RopeScale divides positions before rotation (linear RoPE scaling); 1
	// means none.
	RopeScale float64
	// RopeFreqFactors, when set, divides each rotation frequency (Llama 3.1
	// style long-context scaling, stored in GGUF as rope_freqs.weight).
	RopeFreqFactors []float32

	NormEps    float32
	QKVBias    bool // attention projections carry biases (qwen2)
	TiedOutput bool // the classifier shares the token embedding
}

// KVDim is the width of one token's key (or value) in one layer.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// KVBytesPerToken is the KV storage one token needs across all layers,
// keys and values, in a cache of type t.
func (c *Config) KVBytesPerToken(t KVType) int { return 2 * c.Layers * c.KVDim() * t.Size() }

// Validate checks that the shape is internally consistent, so that the
// forward pass can trust it.
func (c *Config) Validate() error {
	switch {
	case c.Dim <= 0 || c.Hidden <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Vocab <= 0:
		return fmt.Errorf("model config: non-positive size in %+v", *c)
	case c.Dim%c.Heads != 0 && c.HeadDim == 0:
		return fmt.Errorf("model config: dim %d is not divisible by %d heads", c.Dim, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: %d query heads is not a multiple of %d KV heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("model config: head size %d must be positive and even", c.HeadDim)
	case c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
		return fmt.Errorf("model config: RoPE dimension %d must be even and at most the head size %d", c.RopeDim, c.HeadDim)
	case c.ContextLen <= 0:
		return fmt.Errorf("model config: context length %d must be positive", c.ContextLen)
	case !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0):
		return fmt.Errorf("model config: RoPE theta %g must be positive and finite", c.RopeTheta)
	case !(c.RopeScale > 0) || math.IsInf(c.RopeScale, 0):
		return fmt.Errorf("model config: RoPE scale %g must be positive and finite", c.RopeScale)
	case c.RopeFreqFactors != nil && len(c.RopeFreqFactors) != c.RopeDim/2:
		return fmt.Errorf("model config: %d RoPE frequency factors, want %d", len(c.RopeFreqFactors), c.RopeDim/2)
	case !(c.NormEps > 0) || math.IsInf(float64(c.NormEps), 0):
		return fmt.Errorf("model config: norm epsilon %g must be positive and finite", c.NormEps)
	}
	return nil
}
