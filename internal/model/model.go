// Package model holds the architecture and weights of a Llama-family
// decoder and runs its forward pass over a batch of sequences.
//
// It owns the arithmetic order of a forward pass: each token's result
// depends only on that token's own inputs and its own sequence's cached keys
// and values, never on what else is in the batch, so batching many tenants'
// sequences together cannot change any one of them by a single bit.
//
// It never owns KV storage (that is behind SeqCache), never allocates pages,
// and never sees which tenant a sequence belongs to.
package model

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// Layer is one transformer block's weights. Norm weights and biases are
// decoded to float32 at load time; matrices stay in the file's type.
type Layer struct {
	AttnNorm            []float32
	Q, K, V, O          kernels.Matrix
	QBias, KBias, VBias []float32 // nil unless Config.QKVBias
	FFNNorm             []float32
	Gate, Up, Down      kernels.Matrix // Down(silu(Gate x) * Up x)
}

// Model is a loaded model: configuration, weights and tokenizer. A Model is
// read-only after loading and safe for concurrent use by many Runners.
type Model struct {
	Config    Config
	Name      string // e.g. "stories260K" or the file's base name
	Embed     kernels.Matrix
	Layers    []Layer
	OutNorm   []float32
	Output    kernels.Matrix // aliases Embed when Config.TiedOutput
	Tokenizer *tokenizer.Tokenizer
	// WeightType is the type of most weight matrices (reporting only).
	WeightType tensor.DType
	// ChatTemplate is the Jinja chat template from the file, if any.
	ChatTemplate string

	closer  func() error
	file    *mappedFile           // nil: not mapped from a file
	mapping []byte                // the file's mapping the weights alias (Fault)
	faulted atomic.Pointer[error] // the first fault on mapping, for CheckFile
	fpOnce  sync.Once
	fp      string
}

// Close releases the file mapping behind the weights. The Model must not be
// used afterwards.
func (m *Model) Close() error {
	m.mapping = nil
	if m.file != nil {
		m.file.f.Close()
		m.file = nil
	}
	if m.closer == nil {
		return nil
	}
	c := m.closer
	m.closer = nil
	return c()
}

// WeightBytesPerToken is the number of weight bytes a single-token forward
// pass reads: every matrix once, plus one embedding row. It is the
// numerator of the memory-bandwidth bound on decode speed.
func (m *Model) WeightBytesPerToken() int64 {
	size := func(w *kernels.Matrix) int64 { return int64(len(w.Data)) }
	var n int64
	for i := range m.Layers {
		l := &m.Layers[i]
		n += size(&l.Q) + size(&l.K) + size(&l.V) + size(&l.O) + size(&l.Gate) + size(&l.Up) + size(&l.Down)
	}
	n += size(&m.Output)
	n += size(&m.Embed) / int64(m.Embed.Rows)
	return n
}

// MACsPerToken returns the multiply-adds of the matrix products for one
// token: those of every layer's seven products, and those of the
// classifier, which a prompt pays only for the tokens that need logits.
// Attention's are left out, since they grow with the position. With a
// measured arithmetic ceiling (perf.MACRate) they bound prefill and
// batched decode as WeightBytesPerToken and the read bandwidth bound
// single-stream decode.
func (m *Model) MACsPerToken() (layers, classifier int64) {
	macs := func(w *kernels.Matrix) int64 { return int64(w.Rows) * int64(w.Cols) }
	for i := range m.Layers {
		l := &m.Layers[i]
		layers += macs(&l.Q) + macs(&l.K) + macs(&l.V) + macs(&l.O) + macs(&l.Gate) + macs(&l.Up) + macs(&l.Down)
	}
	return layers, macs(&m.Output)
}

// matrix builds a kernels.Matrix over a tensor after checking it has the
// shape the config implies.
func matrix(t *tensor.Tensor, rows, cols int) (kernels.Matrix, error) {
	if t.Rows() != rows || t.Cols() != cols || len(t.Shape) > 2 {
		return kernels.Matrix{}, fmt.Errorf("tensor %q has shape %v, want [%d %d] (cols, rows)", t.Name, t.Shape, cols, rows)
	}
	if !t.Type.Computable() {
		return kernels.Matrix{}, fmt.Errorf("tensor %q has type %s, which Bulkhead cannot compute with yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)", t.Name, t.Type)
	}
	want, err := t.Type.RowBytes(cols)
	if err != nil {
		return kernels.Matrix{}, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if len(t.Data) != want*rows {
		return kernels.Matrix{}, fmt.Errorf("tensor %q: %d bytes of data, want %d", t.Name, len(t.Data), want*rows)
	}
	m := kernels.Matrix{Type: t.Type, Rows: rows, Cols: cols, Data: t.Data}
	m.Scan()
	return m, nil
}

// vector decodes a 1-D tensor of n elements.
func vector(t *tensor.Tensor, n int) ([]float32, error) {
	if t.Elements() != n {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d]", t.Name, t.Shape, n)
	}
	return t.Float32s()
}
