package kernels

import "github.com/bulkhead-llm/bulkhead/internal/tensor"

// Peak multiply-adds: perf times these loops to measure the arithmetic
// ceiling that prefill and batched decode are judged against, as
// ReadBandwidth measures the ceiling of single-stream decode. They live
// here, not in perf, because the ceiling is that of this package's own
// instruction sequences, and the clock stays out of this package.

// PeakMACs runs rounds rounds of the innermost instruction sequence that
// the batched products of weights of type t are built from (for Q8_0, of
// the kernel in use: VNNI's where the CPU has it), with operands
// in registers and L1 rather than in a matrix, and returns the
// multiply-adds they stand for: 8-bit integer products for the quantised
// types (every one of them multiplies int8 by int8), float32 FMAs for
// F32, F16 and BF16. It returns 0 where this build has no SIMD kernels,
// since the pure-Go fallback has no fixed sequence to time.
func PeakMACs(t tensor.DType, rounds int) int64 {
	if !useSIMD || rounds <= 0 {
		return 0
	}
	switch t {
	case tensor.F32, tensor.F16, tensor.BF16:
		peakF32(rounds)
		return int64(rounds) * peakF32MACs
	case tensor.Q8_0:
		peakQ8_0(rounds)
		return int64(rounds) * peakQ8MACs
	default:
		peakQ8(rounds)
		return int64(rounds) * peakQ8MACs
	}
}
