// Package kernels holds the arithmetic of the forward pass: matrix products
// over weights in their file type (F32, F16, BF16, Q8_0, Q4_0), dot products,
// normalisation and activation functions.
//
// Every kernel reduces in a fixed order that depends only on the length of
// its inputs, never on the batch size, the thread count or the CPU features
// found at run time. That is what makes a sequence's logits bit-for-bit the
// same whether it runs alone or batched with other tenants' sequences, and
// it makes the SIMD paths and the pure-Go fallback agree exactly.
//
// This package never allocates on the hot path and never keeps references to
// the slices it is given.
package kernels

import "github.com/bulkhead-llm/bulkhead/internal/tensor"

// Matrix is a row-major weight matrix kept in its file's type: Rows rows of
// Cols elements each, Data holding Rows*RowBytes(Cols) bytes.
type Matrix struct {
	Type       tensor.DType
	Rows, Cols int
	Data       []byte
}
