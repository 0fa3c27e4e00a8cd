// Package convert writes GGUF files: from llama2.c checkpoints, and random
// models at realistic shapes for benchmarks.
//
// It owns the mapping from Bulkhead's model description to the GGUF keys
// llama.cpp expects, so a file written here loads in llama.cpp as well as in
// Bulkhead. It never reads model semantics back; package model does that.
package convert

import (
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// ggml "file type" ids for general.file_type: what most tensors hold. An
// all-Q4_K file is llama.cpp's MOSTLY_Q4_K_S (14), an all-Q5_K one its
// MOSTLY_Q5_K_S (16) and an all-Q3_K one its MOSTLY_Q3_K_S (11);
// MOSTLY_Q4_K_M (15) and MOSTLY_Q5_K_M (17) would promise some Q6_K
// tensors, which WriteGGUF does not write. Q2_K has no entry: no llama.cpp
// file type is Q2_K throughout (MOSTLY_Q2_K, 10, gives the value, down and
// attention output projections Q3_K or Q4_K and the output Q6_K), so
// WriteGGUF writes Q2_K as WriteGGUFQ2K's mix.
var fileType = map[tensor.DType]uint32{
	tensor.F32: 0, tensor.F16: 1, tensor.Q4_0: 2, tensor.Q4_1: 3, tensor.Q8_0: 7,
	tensor.Q5_0: 8, tensor.Q5_1: 9, tensor.BF16: 32,
	tensor.Q3_K: 11, tensor.Q4_K: 14, tensor.Q5_K: 16, tensor.Q6_K: 18,
}

// Types lists the tensor types the converter writes.
func Types() []tensor.DType {
	return []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1,
		tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
}

// Model is what the converter writes: an architecture, its tokenizer, and
// float32 weights named as in GGUF (token_embd.weight, blk.N.attn_q.weight,
// ...).
type Model struct {
	Name      string
	Config    model.Config
	Tokenizer tokenizer.Spec
	Tensors   []tensor.Tensor // all F32; RandomStream's have no Data

	// source, when set, produces the F32 bytes of a tensor whose Data is
	// nil (RandomStream's) when the writer reaches it, so that a model
	// larger than memory can be written.
	source func(i int) ([]byte, error)
	// written, when set, is told each tensor the writer is done with, so
	// that a memory-mapped checkpoint can hand back its pages and a
	// conversion holds one tensor, not the whole file, in memory.
	written func(i int)
}

// tensorData returns the F32 bytes of tensor i.
func (m *Model) tensorData(i int) ([]byte, error) {
	if t := &m.Tensors[i]; t.Data == nil && m.source != nil {
		return m.source(i)
	}
	return m.Tensors[i].Data, nil
}

// WriteGGUF encodes m as GGUF with weight matrices in type t. Vectors (norm
// weights) stay F32, as llama.cpp requires. A matrix whose rows are not a
// whole number of t's blocks (the 172-wide feed-forward of stories260K with
// a 32-element block type, say) is written as F16 instead, which is what
// llama.cpp's own quantizer does for such tensors.
//
// The K-quants (Q2_K to Q6_K) need rows of a multiple of 256. A matrix
// whose rows are not falls back as in llama.cpp's quantizer (fallbackType)
// when the rows are a multiple of 32, else to F16.
//
// Q2_K is the exception to "type t throughout": it writes WriteGGUFQ2K's
// mix, the only Q2_K file llama.cpp makes under MOSTLY_Q2_K.
//
// Every Write function converts one tensor at a time as it writes it, and
// fails part way through on a weight Recode refuses (NaN, infinite, or
// too large for its type), leaving w with a truncated file: write to a
// temporary file and rename it into place.
func WriteGGUF(w io.Writer, m *Model, t tensor.DType) error {
	if t == tensor.Q2_K {
		return WriteGGUFQ2K(w, m)
	}
	ft, ok := fileType[t]
	if !ok {
		names := make([]string, 0, len(Types()))
		for _, t := range Types() {
			names = append(names, t.String())
		}
		return fmt.Errorf("convert: cannot write %s weights (supported: %s)", t, strings.Join(names, ", "))
	}
	return write(w, m, ft, func(string) tensor.DType { return t })
}

// Q4KMFileType, Q5KMFileType, Q3KMFileType and Q2KFileType are llama.cpp's
// general.file_type for MOSTLY_Q4_K_M, MOSTLY_Q5_K_M, MOSTLY_Q3_K_M and
// MOSTLY_Q2_K.
const (
	Q4KMFileType = 15
	Q5KMFileType = 17
	Q3KMFileType = 12
	Q2KFileType  = 10
)

// WriteGGUFQ4KM encodes m the way llama.cpp's Q4_K_M quantisation mixes
// types, the mix most published GGUF files use: Q6_K for the output
// matrix (the token embeddings when the output is tied to them), and for
// the value projections and the feed-forward down projections of the
// first and last eighth of the layers and every third layer in between;
// Q4_K for every other matrix. The same fallbacks as WriteGGUF apply to
// rows that are not a multiple of 256.
func WriteGGUFQ4KM(w io.Writer, m *Model) error {
	return writeKMix(w, m, Q4KMFileType, tensor.Q4_K)
}

// WriteGGUFQ5KM encodes m as llama.cpp's Q5_K_M does: the same tensors as
// WriteGGUFQ4KM's get Q6_K (llama.cpp decides both mixes by one rule), and
// every other matrix Q5_K.
func WriteGGUFQ5KM(w io.Writer, m *Model) error {
	return writeKMix(w, m, Q5KMFileType, tensor.Q5_K)
}

// WriteGGUFQ3KM encodes m as llama.cpp's Q3_K_M does for a llama model
// (llama_tensor_get_type with MOSTLY_Q3_K_M, no experts, not 70B): Q6_K
// for the output matrix (the token embeddings when tied), Q5_K for the
// value projections of the first two layers and Q4_K for the others',
// Q5_K for the feed-forward down projections of the first sixteenth of
// the layers and Q4_K for the rest, Q4_K for the attention output
// projections, and Q3_K for every other matrix. The fallbacks of WriteGGUF
// apply to rows that are not a multiple of 256.
func WriteGGUFQ3KM(w io.Writer, m *Model) error {
	n := m.Config.Layers
	output := outputName(m)
	return write(w, m, Q3KMFileType, func(name string) tensor.DType {
		if name == output {
			return tensor.Q6_K
		}
		layer, kind := layerTensor(name)
		switch {
		case kind == "attn_v.weight" && layer < 2, kind == "ffn_down.weight" && layer < n/16:
			return tensor.Q5_K
		case kind == "attn_v.weight", kind == "ffn_down.weight", kind == "attn_output.weight":
			return tensor.Q4_K
		}
		return tensor.Q3_K
	})
}

// WriteGGUFQ2K encodes m as llama.cpp's Q2_K (MOSTLY_Q2_K, not the
// smaller Q2_K_S) does for a llama model (llama_tensor_get_type, no
// experts, not Falcon): Q6_K for the output matrix (the token embeddings
// when tied; untied embeddings stay Q2_K), Q4_K for the value projections
// when four or more query heads share each key/value head and Q3_K when
// fewer, Q3_K for the feed-forward down and attention output projections
// of every layer, and Q2_K for every other matrix. The fallbacks of
// WriteGGUF apply to rows that are not a multiple of 256.
func WriteGGUFQ2K(w io.Writer, m *Model) error {
	value := tensor.Q3_K
	if c := &m.Config; c.KVHeads > 0 && c.Heads/c.KVHeads >= 4 {
		value = tensor.Q4_K // llama.cpp's n_gqa() >= 4: integer division, as here
	}
	output := outputName(m)
	return write(w, m, Q2KFileType, func(name string) tensor.DType {
		if name == output {
			return tensor.Q6_K
		}
		switch _, kind := layerTensor(name); kind {
		case "attn_v.weight":
			return value
		case "ffn_down.weight", "attn_output.weight":
			return tensor.Q3_K
		}
		return tensor.Q2_K
	})
}

// layerTensor splits a layer's tensor name, blk.N.KIND, into N and KIND
// ("attn_v.weight"); other names give −1 and "".
func layerTensor(name string) (int, string) {
	var layer int
	var kind string
	if _, err := fmt.Sscanf(name, "blk.%d.%s", &layer, &kind); err != nil {
		return -1, ""
	}
	return layer, kind
}

// outputName is the matrix the output projection uses: output.weight, or
// the token embeddings when the model ties the two.
func outputName(m *Model) string {
	for _, t := range m.Tensors {
		if t.Name == "output.weight" {
			return t.Name
		}
	}
	return "token_embd.weight"
}

// writeKMix writes the _M mix of llama.cpp's K-quant schemes: Q6_K where
// WriteGGUFQ4KM's comment says, base everywhere else.
func writeKMix(w io.Writer, m *Model, ft uint32, base tensor.DType) error {
	n := m.Config.Layers
	moreBits := func(i int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }
	output := outputName(m)
	return write(w, m, ft, func(name string) tensor.DType {
		if name == output {
			return tensor.Q6_K
		}
		if layer, kind := layerTensor(name); (kind == "attn_v.weight" || kind == "ffn_down.weight") && moreBits(layer) {
			return tensor.Q6_K
		}
		return base
	})
}

// write encodes m with each matrix in the type pick names for it (see
// fallbackType for the exceptions) and general.file_type ft. Tensors are
// converted one at a time as the writer reaches them, so memory holds one
// converted tensor, not the whole converted model (6 GB more for a 1.1B
// model in F16).
func write(w io.Writer, m *Model, ft uint32, pick func(name string) tensor.DType) error {
	descs := make([]tensor.Tensor, len(m.Tensors))
	for i := range m.Tensors {
		src := &m.Tensors[i]
		if src.Type != tensor.F32 {
			return fmt.Errorf("convert: tensor %q is %s, want F32 input", src.Name, src.Type)
		}
		descs[i] = tensor.Tensor{Name: src.Name, Type: fallbackType(pick(src.Name), src.Shape), Shape: src.Shape}
	}
	var rc recoder
	var dataErr error
	done := func(i int) {
		if m.written != nil && i >= 0 {
			m.written(i)
		}
	}
	err := gguf.WriteFunc(w, Metadata(m, ft), descs, func(i int) ([]byte, error) {
		done(i - 1) // WriteFunc has written it before asking for the next
		src, err := m.tensorData(i)
		if err == nil {
			var out []byte
			if out, err = rc.recode(&descs[i], src); err == nil {
				return out, nil
			}
		}
		dataErr = err
		return nil, err
	})
	if err == nil {
		done(len(descs) - 1)
	}
	if err != nil && err != dataErr {
		return fmt.Errorf("convert: %w", err)
	}
	return err
}

// fallbackType is the type WriteGGUF writes a tensor of the given shape in
// when asked for t: F32 for vectors, t when the rows hold whole blocks of
// t, else for a K-quant whose rows hold whole 32-element blocks the type
// llama.cpp's quantizer substitutes (tensor_type_fallback in
// src/llama-quant.cpp: Q4_0 for Q2_K and Q3_K, Q5_0 for Q4_K, Q5_1 for
// Q5_K, Q8_0 for Q6_K), else F16.
func fallbackType(t tensor.DType, shape []int) tensor.DType {
	switch {
	case len(shape) < 2:
		return tensor.F32
	case shape[0]%t.BlockSize() == 0:
		return t
	case shape[0]%32 != 0:
		return tensor.F16
	case t == tensor.Q2_K, t == tensor.Q3_K:
		return tensor.Q4_0
	case t == tensor.Q4_K:
		return tensor.Q5_0
	case t == tensor.Q5_K:
		return tensor.Q5_1
	case t == tensor.Q6_K:
		return tensor.Q8_0
	default:
		return tensor.F16
	}
}

// Recode returns src (F32) re-encoded as dt. It refuses weights that are
// NaN or infinite, or too large for dt to hold, naming the tensor and the
// element.
func Recode(src *tensor.Tensor, dt tensor.DType) (tensor.Tensor, error) {
	var rc recoder
	dst := tensor.Tensor{Name: src.Name, Type: dt, Shape: src.Shape}
	data, err := rc.recode(&dst, src.Data) // a fresh recoder: data is not shared
	if err != nil {
		return tensor.Tensor{}, err
	}
	dst.Data = data
	return dst, nil
}

// Metadata returns the GGUF keys describing m, in the order llama.cpp's own
// converter writes them.
func Metadata(m *Model, fileType uint32) []gguf.KV {
	c := &m.Config
	a := c.Arch
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.name", Value: m.Name},
		{Key: "general.file_type", Value: fileType},
		{Key: "general.quantization_version", Value: uint32(2)},
		{Key: a + ".vocab_size", Value: uint32(c.Vocab)},
		{Key: a + ".context_length", Value: uint32(c.ContextLen)},
		{Key: a + ".embedding_length", Value: uint32(c.Dim)},
		{Key: a + ".block_count", Value: uint32(c.Layers)},
		{Key: a + ".feed_forward_length", Value: uint32(c.Hidden)},
		{Key: a + ".rope.dimension_count", Value: uint32(c.RopeDim)},
		{Key: a + ".rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: a + ".attention.head_count", Value: uint32(c.Heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(c.KVHeads)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: c.NormEps},
	}
	if c.HeadDim != c.Dim/c.Heads {
		kvs = append(kvs, gguf.KV{Key: a + ".attention.key_length", Value: uint32(c.HeadDim)},
			gguf.KV{Key: a + ".attention.value_length", Value: uint32(c.HeadDim)})
	}
	s := &m.Tokenizer
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.model", Value: s.Model},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: s.Tokens},
	)
	if s.Pre != "" {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.pre", Value: s.Pre})
	}
	if s.Scores != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.scores", Value: s.Scores})
	}
	if s.Types != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.token_type", Value: s.Types})
	}
	if s.Merges != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.merges", Value: s.Merges})
	}
	for _, id := range []struct {
		key string
		v   int
	}{{"bos_token_id", s.BOS}, {"eos_token_id", s.EOS}, {"unknown_token_id", s.UNK}, {"padding_token_id", s.PAD}} {
		if id.v >= 0 {
			kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml." + id.key, Value: uint32(id.v)})
		}
	}
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: s.AddBOS},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: false},
	)
	if s.Model == "llama" {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: s.AddSpacePrefix})
	}
	return kvs
}

// OutputName suggests a file name such as "stories260K-q8_0.gguf".
func OutputName(name string, t tensor.DType) string {
	return fmt.Sprintf("%s-%s.gguf", name, strings.ToLower(t.String()))
}
