// Package kernels holds the arithmetic of the forward pass: matrix products
// over weights in their file type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, and the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K), dot products,
// normalisation and activation functions, and attention over a float32 or
// binary16 KV cache. Every type has a pure-Go kernel on every architecture and AVX2
// kernels on amd64; Q8_0 weights and the K-quants also have AVX-512 VNNI
// kernels (one VPDPBUSD for 32 multiply-adds), chosen at run time where
// the CPU has them (Use picks a family by name).
//
// Every kernel reduces in a fixed order that depends only on the length of
// its inputs, never on the batch size, the thread count or the CPU features
// found at run time. That is what makes a sequence's logits bit-for-bit the
// same whether it runs alone or batched with other tenants' sequences, and
// it makes the SIMD paths and the pure-Go fallback agree exactly.
//
// This package never allocates on the hot path and never keeps references to
// the slices it is given.
//
// What it owns: the canonical reduction orders (order.go), the pure-Go
// kernels that define them (generic.go), the AVX2+FMA+F16C assembly that
// reproduces them on amd64 (simd_*_amd64.s, chosen at run time, or never
// with the purego build tag) and its AVX-512 VNNI variants for Q8_0,
// Q4_0, the K-quants and the legacy types' batched products
// (*vnni_amd64.s), the Q8_0 quantisation of activations, and the Pool of
// worker goroutines that splits a MatMul's rows. What it must never
// do: let a result depend on anything but the inputs it is computing, or
// read and write files, the network or the clock.
//
// MatMul reuses every weight block it loads for several tokens at a time
// (four rows by eight tokens for batched Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
// and the K-quants, or sixteen with VNNI, two rows by three tokens for
// the float types), so prefill and batched decode are bound by
// arithmetic while single-token decode is bound by how fast the weights
// stream from memory. For one to three tokens of Q8_0, and one to seven
// but four of F32, F16 and BF16, the products read each thread's rows as
// four far-apart streams, one row of each at a time, which the hardware
// prefetcher follows far better than four adjacent rows or one row after
// another (1.3-1.8x the bytes per second on a Zen 3; simd_quant_amd64.s);
// the other types are bound by their unpacking even for one token. For the
// same reason the Pool gives each thread a contiguous run of a job's
// chunks of rows and lets it claim several at a time (pool_claim.go).
// Quantised types multiply int8 by int8 with exact integer sums
// (VPMADDUBSW/VPMADDWD), converting to float once per block. Attention's
// loops over cached positions (HeadScores, HeadAccum) and the
// exponentials of softmax and SiLU have kernels of their own with the
// bits of the scalar definitions.
package kernels

import (
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Matrix is a row-major weight matrix kept in its file's type: Rows rows of
// Cols elements each, Data holding Rows*RowBytes(Cols) bytes.
type Matrix struct {
	Type       tensor.DType
	Rows, Cols int
	Data       []byte

	// minFree records that Scan found no Q8_0 weight of -128, so the
	// batched kernel need not look for one in every tile it multiplies.
	minFree bool
}

// Scan reads the weights once and records what lets MatMul skip per-call
// checks (today: whether a Q8_0 matrix holds the weight -128, which the
// batched kernel's sign trick cannot take). Call it after loading and
// before sharing the matrix between goroutines. A matrix never scanned
// gives the same results, only slower. One whose Data changed since must
// be scanned again: a -128 written after a Scan that found none would go
// to the batched kernel and give wrong results. Scan must not run
// concurrently with MatMul on the same matrix.
func (m *Matrix) Scan() {
	m.minFree = false
	if m.Type != tensor.Q8_0 || m.Cols%32 != 0 {
		return
	}
	rb, err := m.Type.RowBytes(m.Cols)
	if err != nil || m.Rows < 0 || !fits(m.Rows, rb, len(m.Data)) {
		return
	}
	data := m.Data[:m.Rows*rb]
	if useSIMD {
		m.minFree = !hasQ8MinSIMD(data)
	} else {
		m.minFree = !hasQ8Min(data)
	}
}

// checkMatrix panics unless w is a matrix the kernels can multiply.
func checkMatrix(w *Matrix) {
	if w == nil {
		panic("kernels: nil matrix")
	}
	switch w.Type {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
	default:
		panic(fmt.Sprintf("kernels: no kernel for %s weights", w.Type))
	}
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil {
		panic(fmt.Sprintf("kernels: %dx%d %s matrix: %v", w.Rows, w.Cols, w.Type, err))
	}
	if w.Rows < 0 || !fits(w.Rows, rb, len(w.Data)) {
		panic(fmt.Sprintf("kernels: %dx%d %s matrix needs %d rows of %d bytes, has %d bytes", w.Rows, w.Cols, w.Type, w.Rows, rb, len(w.Data)))
	}
}

// fits reports whether count items of size each (neither negative) fit in
// have, without forming count·size: a product that overflows wraps to a
// size that could pass, and the assembly reads whatever the checks allow.
func fits(count, size, have int) bool { return size == 0 || count <= have/size }
