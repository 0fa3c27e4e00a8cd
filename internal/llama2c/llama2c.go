// Package llama2c reads checkpoints in the llama2.c format: a 7-integer
// header followed by float32 weight arrays.
//
// It owns the byte layout of that format and names each weight with its
// GGUF tensor name, so the rest of Bulkhead (the model builder, the GGUF
// converter) deals with one naming scheme. It never copies weights: tensors
// alias the bytes it is given, or the file Open maps. It never interprets
// them either.
package llama2c

import (
	"encoding/binary"
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// HeaderBytes is the size of the checkpoint header.
const HeaderBytes = 7 * 4

// Header is the checkpoint's shape.
type Header struct {
	Dim, Hidden, Layers, Heads, KVHeads, Vocab, SeqLen int
	// SharedClassifier is true when the output projection reuses the token
	// embedding (the header stores a positive vocabulary size).
	SharedClassifier bool
}

// HeadDim is the width of one attention head.
func (h Header) HeadDim() int { return h.Dim / h.Heads }

// KVDim is the width of the keys (and values) of one layer.
func (h Header) KVDim() int { return h.Dim * h.KVHeads / h.Heads }

// Checkpoint is a parsed llama2.c file.
type Checkpoint struct {
	Header
	// Tensors carry GGUF names (token_embd.weight, blk.N.attn_q.weight, ...)
	// and GGML shapes (innermost first). output.weight is present only when
	// the classifier is not shared.
	Tensors []tensor.Tensor

	spans   [][2]int      // each tensor's byte range in the file, for Evict
	mapping *mmapfile.Map // the file's mapping, when Open made one
	path    string        // the mapped file, for Guard's errors
}

// Parse validates data as a llama2.c checkpoint and returns views of its
// weights. name labels errors (usually the file path).
func Parse(name string, data []byte) (*Checkpoint, error) {
	if len(data) < HeaderBytes {
		return nil, fmt.Errorf("llama2c %s: %d bytes is shorter than the %d-byte header", name, len(data), HeaderBytes)
	}
	var f [7]int32
	for i := range f {
		f[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	h := Header{Dim: int(f[0]), Hidden: int(f[1]), Layers: int(f[2]), Heads: int(f[3]), KVHeads: int(f[4]), Vocab: int(f[5]), SeqLen: int(f[6])}
	h.SharedClassifier = h.Vocab > 0
	if h.Vocab < 0 {
		h.Vocab = -h.Vocab
	}
	const limit = 1 << 20 // no real model comes near; keeps size arithmetic far from overflow
	for _, v := range []struct {
		what string
		n    int
	}{{"dim", h.Dim}, {"hidden_dim", h.Hidden}, {"n_layers", h.Layers}, {"n_heads", h.Heads}, {"n_kv_heads", h.KVHeads}, {"vocab_size", h.Vocab}, {"seq_len", h.SeqLen}} {
		if v.n <= 0 || v.n > limit {
			return nil, fmt.Errorf("llama2c %s: header field %s = %d is out of range (is this a llama2.c checkpoint?)", name, v.what, v.n)
		}
	}
	if h.Dim%h.Heads != 0 || h.Heads%h.KVHeads != 0 || h.HeadDim()%2 != 0 {
		return nil, fmt.Errorf("llama2c %s: dim %d, %d heads and %d KV heads do not divide into even-sized heads", name, h.Dim, h.Heads, h.KVHeads)
	}

	c := &Checkpoint{Header: h}
	off := HeaderBytes
	var err error
	take := func(tname string, shape ...int) {
		if err != nil {
			return
		}
		// In int64: two dimensions of at most limit each times 4 bytes
		// cannot overflow it, where int on a 32-bit platform could wrap
		// to a size that fits the file.
		n := int64(1)
		for _, d := range shape {
			n *= int64(d)
		}
		end64 := int64(off) + 4*n
		if end64 > int64(len(data)) {
			err = fmt.Errorf("llama2c %s: weights end early: %s needs bytes [%d, %d), file is %d bytes", name, tname, off, end64, len(data))
			return
		}
		end := int(end64)
		if tname != "" {
			c.Tensors = append(c.Tensors, tensor.Tensor{Name: tname, Type: tensor.F32, Shape: shape, Data: data[off:end:end]})
			c.spans = append(c.spans, [2]int{off, end})
		}
		off = end
	}
	D, H, KVD, L, V := h.Dim, h.Hidden, h.KVDim(), h.Layers, h.Vocab
	take("token_embd.weight", D, V)
	// Each per-layer array is stored for all layers at once; split it.
	perLayer := func(suffix string, shape ...int) {
		// Stop at the first error: a corrupt header may claim a million
		// layers, and naming each one's tensor would take seconds.
		for l := 0; l < L && err == nil; l++ {
			take(fmt.Sprintf("blk.%d.%s", l, suffix), shape...)
		}
	}
	perLayer("attn_norm.weight", D)
	perLayer("attn_q.weight", D, D)
	perLayer("attn_k.weight", D, KVD)
	perLayer("attn_v.weight", D, KVD)
	perLayer("attn_output.weight", D, D)
	perLayer("ffn_norm.weight", D)
	perLayer("ffn_gate.weight", D, H)
	perLayer("ffn_down.weight", H, D)
	perLayer("ffn_up.weight", D, H)
	take("output_norm.weight", D)
	take("", h.SeqLen, h.HeadDim()/2) // freq_cis_real: unused, RoPE is computed
	take("", h.SeqLen, h.HeadDim()/2) // freq_cis_imag
	if !h.SharedClassifier {
		take("output.weight", D, V)
	}
	if err != nil {
		return nil, err
	}
	if off != len(data) {
		return nil, fmt.Errorf("llama2c %s: %d bytes after the last weight array (expected the file to end at %d); the header does not describe this file", name, len(data)-off, off)
	}
	return c, nil
}

// EncodeHeader returns the header bytes for h; tests and
// the random-model generator prepend it to the weight arrays.
func EncodeHeader(h Header) []byte {
	b := make([]byte, HeaderBytes)
	vocab := h.Vocab
	if !h.SharedClassifier {
		vocab = -vocab
	}
	for i, v := range []int{h.Dim, h.Hidden, h.Layers, h.Heads, h.KVHeads, vocab, h.SeqLen} {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
	}
	return b
}
