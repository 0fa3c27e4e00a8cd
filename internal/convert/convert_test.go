package convert

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

var tiny = Shape{Name: "tiny", Dim: 64, Hidden: 96, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 512, ContextLen: 64}

func encode(t testing.TB, m *Model, dt tensor.DType) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, m, dt); err != nil {
		t.Fatalf("WriteGGUF %s: %v", dt, err)
	}
	return buf.Bytes()
}

// A seed names one file: Random and RandomStream write the same bytes,
// again on a second write of the same streamed model, and another seed
// writes different ones.
func TestRandomIsDeterministic(t *testing.T) {
	qwen := tiny
	qwen.Arch = "qwen2"
	for _, s := range []Shape{tiny, qwen} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.Q4_0} {
			m, err := Random(s, 9)
			if err != nil {
				t.Fatal(err)
			}
			want := encode(t, m, dt)
			ms, err := RandomStream(s, 9)
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range ms.Tensors {
				if tt.Data != nil {
					t.Fatalf("RandomStream holds the weights of %s", tt.Name)
				}
			}
			for try := 0; try < 2; try++ {
				if got := encode(t, ms, dt); !bytes.Equal(got, want) {
					t.Errorf("%s %s: RandomStream write %d differs from Random's", s.Arch, dt, try+1)
				}
			}
			other, err := Random(s, 10)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(encode(t, other, dt), want) {
				t.Errorf("%s %s: seeds 9 and 10 wrote the same file", s.Arch, dt)
			}
		}
	}
}

// The one seed whose xorshift state would be 0 still draws weights: a
// state of 0 stays 0 and made every matrix all zeros.
func TestRandomZeroStateSeed(t *testing.T) {
	// seed·k + 1 = 0 (mod 2^64): seed = −k⁻¹, k⁻¹ by Newton's iteration.
	const k = 0x9e3779b97f4a7c15
	inv := uint64(k)
	for range 6 {
		inv *= 2 - k*inv
	}
	seed := -inv
	if seed*k+1 != 0 {
		t.Fatalf("seed %#x does not zero the state", seed)
	}
	m, err := Random(tiny, seed)
	if err != nil {
		t.Fatal(err)
	}
	q := m.Tensors[2] // blk.0.attn_q.weight
	if bytes.Count(q.Data, []byte{0}) == len(q.Data) {
		t.Errorf("seed %#x: %s is all zeros", seed, q.Name)
	}
}

// Shapes whose heads do not split the width are refused, not a panic (no
// heads) or a model whose attention matrices no loader accepts.
func TestRandomRejectsUnevenHeads(t *testing.T) {
	for _, heads := range []int{0, -2, 6} { // 100 = 6·16 + 4
		s := Shape{Name: "odd", Dim: 100, Hidden: 96, Layers: 1, Heads: heads, KVHeads: 2, Vocab: 512, ContextLen: 32}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%d heads: panic %v", heads, r)
				}
			}()
			if _, err := RandomStream(s, 1); err == nil || !strings.Contains(err.Error(), "heads") {
				t.Errorf("%d heads over dim 100: err %v, want one about heads", heads, err)
			}
		}()
	}
}

// heapSampler is a writer that records the most live heap it sees at any
// write of tensor data (not padding), after a collection, so garbage does
// not count.
type heapSampler struct{ peak uint64 }

func (h *heapSampler) Write(p []byte) (int, error) {
	if len(p) < 1024 {
		return len(p), nil
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	h.peak = max(h.peak, ms.HeapAlloc)
	return len(p), nil
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Writing converts one tensor at a time: the memory a write adds is about
// one converted tensor, not the whole converted model (which the writer
// used to hold, with a float32 copy of the tensor it was on: 8.6 GB at
// peak for a 1.1B Q4_0 file). A streamed random model adds about as
// little, though its float32 weights are nearly four times the Q8_0 file.
func TestWriteGGUFHoldsOneTensor(t *testing.T) {
	s := Shape{Name: "mem", Dim: 256, Hidden: 1024, Layers: 4, Heads: 4, KVHeads: 4, Vocab: 1024, ContextLen: 64}
	const largest = 256 * 1024 * 34 / 32 // one feed-forward matrix in Q8_0
	m, err := Random(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	whole := len(encode(t, m, tensor.Q8_0))
	base := liveHeap()
	var h heapSampler
	if err := WriteGGUF(&h, m, tensor.Q8_0); err != nil {
		t.Fatal(err)
	}
	extra := int(h.peak) - int(base)
	t.Logf("Random: file %d bytes, writing added %d bytes of live heap", whole, extra)
	if extra > 4*largest {
		t.Errorf("writing a %d-byte Q8_0 file added %d bytes of live heap, want at most %d (a few tensors)", whole, extra, 4*largest)
	}
	runtime.KeepAlive(m)

	m, h = nil, heapSampler{}
	ms, err := RandomStream(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	base = liveHeap()
	if err := WriteGGUF(&h, ms, tensor.Q8_0); err != nil {
		t.Fatal(err)
	}
	extra = int(h.peak) - int(base)
	t.Logf("RandomStream: writing added %d bytes of live heap", extra)
	if extra > 8*largest { // a float32 matrix too
		t.Errorf("writing a streamed random model added %d bytes of live heap, want at most %d", extra, 8*largest)
	}
}

// setF32 overwrites element i of an F32 tensor.
func setF32(tt *tensor.Tensor, i int, v float32) {
	binary.LittleEndian.PutUint32(tt.Data[4*i:], math.Float32bits(v))
}

// NaN and infinite weights are refused with the tensor and the place
// named, in every output type: they mean a damaged checkpoint, and written
// out they decode as NaN (or, in a block's scale, turn the whole block to
// NaN) in Bulkhead and llama.cpp alike.
func TestWriteGGUFRefusesNonFiniteWeights(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_K} {
			m, err := Random(Shape{Name: "k", Dim: 256, Hidden: 256, Layers: 1, Heads: 4, KVHeads: 4, Vocab: 512, ContextLen: 32}, 1)
			if err != nil {
				t.Fatal(err)
			}
			setF32(&m.Tensors[3], 256*2+7, v) // blk.0.attn_k.weight
			err = WriteGGUF(&bytes.Buffer{}, m, dt)
			want := `convert: tensor "blk.0.attn_k.weight": weight at row 2, column 7 is ` + map[bool]string{true: "NaN", false: "-Inf"}[v != v]
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s with %v: err %v, want %q", dt, v, err, want)
			}
		}
	}
}

// Finite weights too large for the output type are refused too: past
// 65504 an F16 weight is infinite, and a block whose largest weight is
// past 65504·127 has no finite float16 Q8_0 scale (llama.cpp's quantizer
// refuses to write such a block). Large weights that fit are kept.
func TestWriteGGUFRefusesOverflow(t *testing.T) {
	for _, tc := range []struct {
		dt   tensor.DType
		v    float32
		want string
	}{
		{tensor.F16, 70000, `weight at row 1, column 3 is 70000, beyond what F16 can hold`},
		{tensor.Q8_0, 1e7, `the Q8_0 block at row 1, column 0 holds weights up to 1e+07, too large for its float16 scale`},
		{tensor.Q4_K, 1e9, `the Q4_K block at row 1, column 0 holds weights up to 1e+09`},
		{tensor.F16, 65000, ""},
		{tensor.Q8_0, 8e6, ""},
		{tensor.BF16, 1e30, ""},
	} {
		m, err := Random(Shape{Name: "k", Dim: 256, Hidden: 256, Layers: 1, Heads: 4, KVHeads: 4, Vocab: 512, ContextLen: 32}, 1)
		if err != nil {
			t.Fatal(err)
		}
		setF32(&m.Tensors[2], 256+3, tc.v) // blk.0.attn_q.weight
		var buf bytes.Buffer
		err = WriteGGUF(&buf, m, tc.dt)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s with a weight of %g: %v", tc.dt, tc.v, err)
				continue
			}
			f, err := gguf.Parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			q, _ := f.Tensor("blk.0.attn_q.weight")
			vals, err := q.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if got := vals[256+3]; math.Abs(float64(got-tc.v)) > 0.01*float64(tc.v) {
				t.Errorf("%s: weight %g reads back as %g", tc.dt, tc.v, got)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), `tensor "blk.0.attn_q.weight": `+tc.want) {
			t.Errorf("%s with a weight of %g: err %v, want %q", tc.dt, tc.v, err, tc.want)
		}
	}
}

// Recode, used on its own, encodes as Quantize does and keeps F32 as is.
func TestRecode(t *testing.T) {
	m, err := Random(tiny, 2)
	if err != nil {
		t.Fatal(err)
	}
	src := &m.Tensors[2]
	vals, err := src.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.Q8_0, tensor.Q4_1} {
		got, err := Recode(src, dt)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := dt.RowBytes(len(vals))
		want := make([]byte, n)
		if err := tensor.Quantize(dt, want, vals); err != nil {
			t.Fatal(err)
		}
		if got.Type != dt || got.Name != src.Name || !bytes.Equal(got.Data, want) {
			t.Errorf("Recode to %s: %s %s, bytes equal %v", dt, got.Name, got.Type, bytes.Equal(got.Data, want))
		}
	}
	if _, err := Recode(src, tensor.Q4_K); err == nil { // 64-wide rows
		t.Error("Recode to Q4_K of 64-wide rows succeeded")
	}
}

// The writer reports each tensor once it has been written, in order and
// before it asks for the next, so that a memory-mapped checkpoint can hand
// back each tensor's pages as the conversion moves on (FromLlama2C wires
// this to llama2c's Evict); the last is reported when the file is done.
func TestWriteReportsWrittenTensors(t *testing.T) {
	m, err := RandomStream(tiny, 3)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	source := m.source
	m.source = func(i int) ([]byte, error) {
		events = append(events, fmt.Sprintf("read %d", i))
		return source(i)
	}
	m.written = func(i int) { events = append(events, fmt.Sprintf("written %d", i)) }
	var want []string
	for i := range m.Tensors {
		want = append(want, fmt.Sprintf("read %d", i), fmt.Sprintf("written %d", i))
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.Q8_0} {
		events = nil
		if err := WriteGGUF(io.Discard, m, dt); err != nil {
			t.Fatal(err)
		}
		if strings.Join(events, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: events %v, want %v", dt, events, want)
		}
	}
}
