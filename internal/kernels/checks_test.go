package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// mustRefuse fails the test unless f panics with one of this package's
// own messages: a slice-bounds or nil-pointer panic from deep inside a
// kernel (or, on the assembly path, no panic at all but a read or write
// past a slice) is what the checks exist to prevent.
func mustRefuse(t *testing.T, what string, f func()) {
	t.Helper()
	r := catch(f)
	if s := fmt.Sprint(r); r == nil || !strings.HasPrefix(s, "kernels: ") {
		t.Fatalf("%s: panicked with %v, want a kernels: message", what, r)
	}
}

// The head kernels' checks are all that stands between the assembly and
// memory outside the slices: negative counts and strides whose products
// overflow must be refused, on the Go path first (where they fail
// cleanly) and then on the SIMD path (where they would read or write
// anywhere).
func TestHeadKernelsRefuseNegativeAndOverflow(t *testing.T) {
	off := []int32{0, 8}
	big := 1<<62 + 1000 // four times it wraps to 4000 bytes
	f32 := func(n int) []float32 { return make([]float32, n) }
	f16 := func(n int) []uint16 { return make([]uint16, n) }
	cases := map[string]func(){
		"scores rows -1":   func() { HeadScores(f32(20), 10, f32(16), 8, f32(100), 16, off, -1) },
		"scores hd -1":     func() { HeadScores(f32(20), 10, f32(16), -1, f32(100), 16, off, 3) },
		"scores stride":    func() { HeadScores(f32(20), 10, f32(16), 8, f32(100), big, off, 4) },
		"scores outStride": func() { HeadScores(f32(20), big, f32(16), 8, f32(100), 16, []int32{0, 0, 0, 0}, 3) },
		"scores hd huge":   func() { HeadScores(f32(20), 10, f32(16), 1<<62, f32(100), 16, []int32{0, 0, 0, 0}, 3) },
		"accum rows -1":    func() { HeadAccum(f32(16), 8, f32(20), 10, f32(100), 16, off, -1) },
		"accum hd -1":      func() { HeadAccum(f32(16), -1, f32(20), 10, f32(100), 16, off, 3) },
		"accum stride":     func() { HeadAccum(f32(16), 8, f32(20), 10, f32(100), big, off, 4) },
		"accum wStride":    func() { HeadAccum(f32(32), 8, f32(20), big, f32(100), 16, []int32{0, 0, 0, 0}, 3) },
		"f16 scores rows":  func() { HeadScoresF16(f32(20), 10, f32(16), 8, f16(100), 16, off, -1) },
		"f16 scores hd":    func() { HeadScoresF16(f32(20), 10, f32(16), -1, f16(100), 16, off, 3) },
		"f16 accum rows":   func() { HeadAccumF16(f32(16), 8, f32(20), 10, f16(100), 16, off, -1) },
		"f16 accum stride": func() { HeadAccumF16(f32(16), 8, f32(20), 10, f16(100), big, off, 4) },
	}
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		for name, f := range cases {
			withPath(simd, func() { mustRefuse(t, fmt.Sprintf("simd=%v %s", simd, name), f) })
		}
	}
}

// Sizes whose products overflow int must be refused with a message, not
// wrap to a small number that passes the checks and sends the kernels
// past the end of the weights.
func TestMatrixShapeOverflowRefused(t *testing.T) {
	if math.MaxInt == math.MaxInt32 {
		t.Skip("needs 64-bit int")
	}
	p := NewPool(1)
	defer p.Close()
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		withPath(simd, func() {
			// 2^31 rows of 2^31 floats is 2^64 bytes: 0 once wrapped.
			w := &Matrix{Type: tensor.F32, Rows: 1 << 31, Cols: 1 << 31, Data: make([]byte, 64)}
			mustRefuse(t, "MatMul of a 2^31x2^31 matrix", func() {
				p.MatMul(make([]float32, 16), w, make([]float32, 16), 1<<33)
			})
			// 2^58+1 rows of 64 bytes wraps to 64 bytes.
			v := &Matrix{Type: tensor.F32, Rows: 1<<58 + 1, Cols: 16, Data: make([]byte, 64)}
			mustRefuse(t, "RowTo of a wrapping matrix", func() { RowTo(make([]float32, 16), v, 1<<57) })
			r := catch(func() {
				p.MatMul(make([]float32, 16), &Matrix{Type: tensor.F32, Rows: -1, Cols: 16}, make([]float32, 16), 1)
			})
			if s := fmt.Sprint(r); !strings.HasPrefix(s, "kernels: ") || strings.Contains(s, "nil") {
				t.Fatalf("MatMul of -1 rows panicked with %q, want a message naming the rows", s)
			}
			mustRefuse(t, "MatMuls of no matrix", func() {
				p.MatMuls(make([]float32, 16), 1, []Product{{Out: make([]float32, 16)}})
			})
		})
	}
}

// MatMul allocates nothing when single-token decode and batched prefill
// alternate on one Pool, as they do in a server: the interleaved
// activations the eight-token kernels read must keep their buffer across
// calls that do not use it.
func TestMatMulAllocsAlternatingBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, threads := range []int{1, 2} {
		p := NewPool(threads)
		for _, typ := range []tensor.DType{tensor.Q8_0, tensor.Q4_K} {
			w, _ := randMatrix(t, rng, typ, 130, 256)
			x := randFloats(rng, 9*256)
			out := make([]float32, 9*130)
			p.MatMul(out, w, x, 9)
			if a := testing.AllocsPerRun(10, func() {
				p.MatMul(out, w, x, 1)
				p.MatMul(out, w, x, 9)
			}); a != 0 {
				t.Errorf("threads %d %s: %v allocations per decode and prefill step", threads, typ, a)
			}
		}
		p.Close()
	}
}
