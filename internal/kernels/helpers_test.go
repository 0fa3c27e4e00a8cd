package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

var allTypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0}

func quantType(t tensor.DType) bool { return t == tensor.Q8_0 || t == tensor.Q4_0 }

// randFloats returns n values spread over a few orders of magnitude, with
// both signs, the way activations and weights are.
func randFloats(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	return v
}

// randMatrix returns a rows×cols matrix of type t and its values decoded
// back to float32 (what the kernels actually multiply).
func randMatrix(t *testing.T, rng *rand.Rand, typ tensor.DType, rows, cols int) (*Matrix, []float32) {
	t.Helper()
	src := randFloats(rng, rows*cols)
	rb, err := typ.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	dec := make([]float32, rows*cols)
	for r := 0; r < rows; r++ {
		if err := tensor.Quantize(typ, data[r*rb:r*rb+rb], src[r*cols:r*cols+cols]); err != nil {
			t.Fatal(err)
		}
		if err := tensor.Dequantize(typ, dec[r*cols:r*cols+cols], data[r*rb:r*rb+rb]); err != nil {
			t.Fatal(err)
		}
	}
	return &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}, dec
}

// withPath runs f with the SIMD kernels on or off and restores the switch.
func withPath(simd bool, f func()) {
	old := useSIMD
	useSIMD = simd
	defer func() { useSIMD = old }()
	f()
}

// firstBitDiff returns the index of the first value whose bits differ, or -1.
func firstBitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// eachQ8Path runs f once on each family of kernels this CPU has: the AVX2
// ones ("base"; the pure-Go ones where there are none) and, where the CPU
// has AVX-512 VNNI, those too ("vnni": Q8_0's and the K-quants'). A VNNI
// machine, which selects its own kernels, thereby still checks the AVX2
// ones.
func eachQ8Path(t *testing.T, f func(t *testing.T)) {
	old := useVNNI
	defer func() { useVNNI = old }()
	useVNNI = false
	t.Run("base", f)
	if hasVNNI {
		useVNNI = true
		t.Run("vnni", f)
	}
}

// fillBytes sets every byte of b to v: a block of quants all at one
// extreme.
func fillBytes(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func needSIMD(t *testing.T) {
	t.Helper()
	if !hasAVX2 {
		t.Skip("no SIMD kernels on this machine; the Go path is the only path")
	}
}

// axpy1 is y += a·x through HeadAccum with one head and one row: the
// path attention takes, on whichever kernels are selected.
func axpy1(y []float32, a float32, x []float32) {
	HeadAccum(y, len(y), []float32{a}, 1, x, len(y), []int32{0}, 1)
}
