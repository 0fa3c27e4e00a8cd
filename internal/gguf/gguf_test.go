package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// allKVs holds one value of every GGUF type, arrays of every element type,
// and nested arrays.
func allKVs() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"general.alignment", uint32(64)},
		{"k.u8", uint8(200)},
		{"k.i8", int8(-100)},
		{"k.u16", uint16(60000)},
		{"k.i16", int16(-30000)},
		{"k.u32", uint32(4000000000)},
		{"k.i32", int32(-2000000000)},
		{"k.u64", uint64(1<<63 + 5)},
		{"k.i64", int64(-1 << 62)},
		{"k.f32", float32(1.5)},
		{"k.f64", -2.25},
		{"k.true", true},
		{"k.false", false},
		{"k.str", "héllo, wörld"},
		{"k.empty", ""},
		{"a.u8", []uint8{0, 1, 255}},
		{"a.i8", []int8{-128, 0, 127}},
		{"a.u16", []uint16{0, 65535}},
		{"a.i16", []int16{-32768, 32767}},
		{"a.u32", []uint32{0, 1 << 31}},
		{"a.i32", []int32{-5, 0, 5}},
		{"a.u64", []uint64{1 << 60}},
		{"a.i64", []int64{-1 << 60, 7}},
		{"a.f32", []float32{0.5, -3, 1e-8}},
		{"a.f64", []float64{1e30, -0.125}},
		{"a.bool", []bool{true, false, true}},
		{"a.str", []string{"<unk>", "", "▁the"}},
		{"a.empty", []int32{}},
		{"a.nested", []any{[]int32{1, 2}, []string{"x"}, []any{[]uint8{}, []float64{1}}}},
		{"a.nestedempty", []any{}},
	}
}

// sampleTensors returns small tensors of a plain, a half and a quantized
// type, with distinct byte patterns.
func sampleTensors(t testing.TB) []tensor.Tensor {
	t.Helper()
	mk := func(name string, typ tensor.DType, shape ...int) tensor.Tensor {
		tt := tensor.Tensor{Name: name, Type: typ, Shape: shape}
		n, err := typ.RowBytes(tt.Elements())
		if err != nil {
			t.Fatal(err)
		}
		tt.Data = make([]byte, n)
		for i := range tt.Data {
			tt.Data[i] = byte(i*7 + len(name) + int(typ))
		}
		return tt
	}
	return []tensor.Tensor{
		mk("t.a", tensor.F32, 8, 2),
		mk("t.b", tensor.Q8_0, 32, 3),
		mk("t.c", tensor.F16, 4),
		mk("t.d", tensor.Q4_K, 256, 1, 2, 1),
	}
}

func writeBytes(t testing.TB, kvs []KV, ts []tensor.Tensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, kvs, ts); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return buf.Bytes()
}

// offsetIn returns where b starts inside data, or -1 if it does not lie
// entirely within data.
func offsetIn(data, b []byte) int {
	if len(b) == 0 || len(data) == 0 {
		return -1
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(data)) {
		return -1
	}
	return int(p - base)
}

func checkSame(t *testing.T, f *File, data []byte, kvs []KV, ts []tensor.Tensor, align int) {
	t.Helper()
	if f.Version != 3 || f.Alignment != align {
		t.Errorf("version %d alignment %d, want 3 and %d", f.Version, f.Alignment, align)
	}
	if !reflect.DeepEqual(f.KVs, kvs) {
		for i := range kvs {
			if i >= len(f.KVs) || !reflect.DeepEqual(f.KVs[i], kvs[i]) {
				t.Fatalf("KV %d: got %#v, want %#v", i, f.KVs[min(i, len(f.KVs)-1)], kvs[i])
			}
		}
		t.Fatalf("got %d KVs, want %d", len(f.KVs), len(kvs))
	}
	if len(f.Tensors) != len(ts) {
		t.Fatalf("got %d tensors, want %d", len(f.Tensors), len(ts))
	}
	for i, want := range ts {
		got := f.Tensors[i]
		if got.Name != want.Name || got.Type != want.Type || !reflect.DeepEqual(got.Shape, want.Shape) ||
			!bytes.Equal(got.Data, want.Data) {
			t.Errorf("tensor %d: got %s %v %v (%d bytes), want %s %v %v (%d bytes)",
				i, got.Name, got.Type, got.Shape, len(got.Data), want.Name, want.Type, want.Shape, len(want.Data))
		}
		off := offsetIn(data, got.Data)
		if off < 0 {
			t.Errorf("tensor %q data does not alias the file", got.Name)
		} else if off%align != 0 {
			t.Errorf("tensor %q data at file offset %d, not aligned to %d", got.Name, off, align)
		}
		if cap(got.Data) != len(got.Data) {
			t.Errorf("tensor %q data has capacity %d past its %d bytes", got.Name, cap(got.Data), len(got.Data))
		}
		if p, ok := f.Tensor(want.Name); !ok || p != &f.Tensors[i] {
			t.Errorf("Tensor(%q) = %v, %v", want.Name, p, ok)
		}
	}
}

func TestRoundTripParse(t *testing.T) {
	kvs, ts := allKVs(), sampleTensors(t)
	data := writeBytes(t, kvs, ts)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, data, kvs, ts, 64)
	if f.DataOffset%64 != 0 {
		t.Errorf("data section at %d, not aligned", f.DataOffset)
	}
	// Rewriting the parsed file reproduces it byte for byte.
	if again := writeBytes(t, f.KVs, f.Tensors); !bytes.Equal(again, data) {
		t.Errorf("rewrite differs: %d bytes vs %d", len(again), len(data))
	}
	if _, ok := f.Tensor("missing"); ok {
		t.Error("Tensor(missing) found")
	}
}

func TestRoundTripDefaultAlignmentNoTensors(t *testing.T) {
	kvs := []KV{{"general.architecture", "x"}}
	data := writeBytes(t, kvs, nil)
	if len(data)%DefaultAlignment != 0 {
		t.Errorf("file is %d bytes, not padded to %d", len(data), DefaultAlignment)
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, data, kvs, nil, DefaultAlignment)

	ts := sampleTensors(t)
	data = writeBytes(t, nil, ts)
	if f, err = Parse(data); err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, data, []KV{}, ts, DefaultAlignment)
}

func TestRoundTripOpen(t *testing.T) {
	kvs, ts := allKVs(), sampleTensors(t)
	path := filepath.Join(t.TempDir(), "model.gguf")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(fh, kvs, ts); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != path {
		t.Errorf("Path = %q, want %q", f.Path, path)
	}
	// The tensors must alias the file's bytes, wherever they live.
	for i := range f.Tensors {
		if !bytes.Equal(f.Tensors[i].Data, ts[i].Data) {
			t.Errorf("tensor %q data differs after Open", ts[i].Name)
		}
	}
	if !reflect.DeepEqual(f.KVs, kvs) {
		t.Error("KVs differ after Open")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Tensors[0].Data != nil {
		t.Error("Close left tensor Data in place")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(empty)
	wantErr(t, err, "gguf "+empty+": truncated: magic needs 4 bytes at offset 0, file is 0 bytes")

	missing := filepath.Join(dir, "missing.gguf")
	_, err = Open(missing)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "gguf "+missing+": ") {
		t.Errorf("Open(missing) = %v", err)
	}

	data := writeBytes(t, nil, sampleTensors(t))
	short := filepath.Join(dir, "short.gguf")
	if err := os.WriteFile(short, data[:len(data)-40], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(short)
	wantErr(t, err, "gguf "+short+`: tensor "t.d" data ends at`)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Path != short {
		t.Errorf("error %v is not a *FormatError for %s", err, short)
	}
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", substr)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not contain %q", err, substr)
	}
}

func TestAccessors(t *testing.T) {
	f, err := Parse(writeBytes(t, append(allKVs(),
		KV{"llama.block_count", "twelve"},
		KV{"n.neg", int32(-3)},
		KV{"a.big", []uint32{1, 1 << 31}},
		KV{"a.neg", []int64{-1 << 31, 5}},
	), nil))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.Architecture(); err != nil || s != "llama" {
		t.Errorf("Architecture = %q, %v", s, err)
	}
	for key, want := range map[string]uint64{"k.u8": 200, "k.u16": 60000, "k.u32": 4000000000, "k.u64": 1<<63 + 5, "general.alignment": 64} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("Uint(%q) = %d, %v; want %d", key, got, err, want)
		}
	}
	for key, want := range map[string]float64{"k.f32": 1.5, "k.f64": -2.25, "k.i8": -100, "k.u8": 200} {
		if got, err := f.Float(key); err != nil || got != want {
			t.Errorf("Float(%q) = %v, %v; want %v", key, got, err, want)
		}
	}
	if b, err := f.Bool("k.true"); err != nil || !b {
		t.Errorf("Bool = %v, %v", b, err)
	}
	if s, err := f.Strings("a.str"); err != nil || !reflect.DeepEqual(s, []string{"<unk>", "", "▁the"}) {
		t.Errorf("Strings = %q, %v", s, err)
	}
	if s, err := f.Float32s("a.f32"); err != nil || !reflect.DeepEqual(s, []float32{0.5, -3, 1e-8}) {
		t.Errorf("Float32s = %v, %v", s, err)
	}
	if s, err := f.Float32s("a.f64"); err != nil || !reflect.DeepEqual(s, []float32{1e30, -0.125}) {
		t.Errorf("Float32s(f64) = %v, %v", s, err)
	}
	if s, err := f.Int32s("a.i32"); err != nil || !reflect.DeepEqual(s, []int32{-5, 0, 5}) {
		t.Errorf("Int32s = %v, %v", s, err)
	}
	if s, err := f.Int32s("a.u8"); err != nil || !reflect.DeepEqual(s, []int32{0, 1, 255}) {
		t.Errorf("Int32s(u8) = %v, %v", s, err)
	}
	if s, err := f.Int32s("a.neg"); err != nil || !reflect.DeepEqual(s, []int32{-1 << 31, 5}) {
		t.Errorf("Int32s(i64) = %v, %v", s, err)
	}
	// Returned slices are copies: changing them does not change the file.
	s, _ := f.Int32s("a.i32")
	s[0] = 99
	if again, _ := f.Int32s("a.i32"); again[0] != -5 {
		t.Error("Int32s returned the file's own slice")
	}

	errs := []struct {
		err  error
		want string
	}{
		{second(f.Uint("llama.block_count")), `gguf: key "llama.block_count" is a string, want an integer`},
		{second(f.Uint("missing")), `gguf: key "missing" not found`},
		{second(f.Uint("n.neg")), `gguf: key "n.neg" is -3, want a non-negative integer`},
		{second(f.Uint("k.f32")), `gguf: key "k.f32" is a float32, want an integer`},
		{second(f.String("k.u32")), `gguf: key "k.u32" is a uint32, want a string`},
		{second(f.Float("k.str")), `gguf: key "k.str" is a string, want a number`},
		{second(f.Bool("k.i8")), `gguf: key "k.i8" is an int8, want a bool`},
		{second(f.Strings("a.i32")), `gguf: key "a.i32" is an array of int32, want an array of string`},
		{second(f.Float32s("a.nested")), `gguf: key "a.nested" is an array of arrays, want an array of float32`},
		{second(f.Int32s("a.big")), `gguf: key "a.big" element 1 is 2147483648, which does not fit in an int32`},
		{second(f.Int32s("a.f32")), `gguf: key "a.f32" is an array of float32, want an array of int32`},
		{second(f.Architecture()), ""},
	}
	for _, e := range errs {
		if e.want == "" {
			if e.err != nil {
				t.Errorf("unexpected error %v", e.err)
			}
			continue
		}
		if e.err == nil || e.err.Error() != e.want {
			t.Errorf("error %v, want %q", e.err, e.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestAccessorsOnHandBuiltFile(t *testing.T) {
	f := &File{Path: "x.gguf", KVs: []KV{{"a", uint16(3)}}, Tensors: sampleTensors(t)}
	if n, err := f.Uint("a"); err != nil || n != 3 {
		t.Errorf("Uint = %d, %v", n, err)
	}
	if _, err := f.Uint("b"); err == nil || err.Error() != `gguf x.gguf: key "b" not found` {
		t.Errorf("error %v", err)
	}
	if p, ok := f.Tensor("t.c"); !ok || p != &f.Tensors[2] {
		t.Error("Tensor(t.c) not found")
	}
}

type limitWriter struct{ left int }

func (w *limitWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	good := sampleTensors(t)
	short := sampleTensors(t)
	short[1].Data = short[1].Data[:len(short[1].Data)-1]
	bad := func(mod func(*tensor.Tensor)) []tensor.Tensor {
		ts := sampleTensors(t)
		mod(&ts[0])
		return ts
	}
	deep := any([]int32{1})
	for i := 0; i < maxDepth; i++ {
		deep = []any{deep}
	}
	cases := []struct {
		name string
		kvs  []KV
		ts   []tensor.Tensor
		want string
	}{
		{"size", nil, short, `tensor "t.b": Q8_0 shape [32 3] needs 102 bytes, Data has 101`},
		{"dup key", []KV{{"a", "x"}, {"a", "y"}}, good, `duplicate key "a"`},
		{"dup tensor", nil, append(good, good[2]), `duplicate tensor name "t.c"`},
		{"go int", []KV{{"n", 3}}, good, `key "n": value of Go type int has no GGUF type`},
		{"go int slice", []KV{{"n", []int{3}}}, good, `key "n": value of Go type []int has no GGUF type`},
		{"alignment type", []KV{{AlignmentKey, 32}}, good, "general.alignment is a Go int, want a uint32"},
		{"alignment value", []KV{{AlignmentKey, uint32(48)}}, good, "general.alignment 48 is not a power of two"},
		{"nested scalar", []KV{{"n", []any{[]int8{1}, "x"}}}, good, `key "n": element 1 of a nested array is a string, want an array`},
		{"too deep", []KV{{"n", deep}}, good, `key "n" nests arrays more than 8 deep`},
		{"no dims", nil, bad(func(t *tensor.Tensor) { t.Shape = nil }), `tensor "t.a" has 0 dimensions, want 1 to 4`},
		{"5 dims", nil, bad(func(t *tensor.Tensor) { t.Shape = []int{1, 1, 1, 1, 16} }), `tensor "t.a" has 5 dimensions`},
		{"zero dim", nil, bad(func(t *tensor.Tensor) { t.Shape = []int{16, 0} }), `tensor "t.a" dimension 1 is 0`},
		{"overflow", nil, bad(func(t *tensor.Tensor) { t.Shape = []int{math.MaxInt/2 + 1, 4} }), `tensor "t.a" shape [` + fmt.Sprint(math.MaxInt/2+1) + ` 4] has too many elements`},
		{"byte overflow", nil, bad(func(t *tensor.Tensor) { t.Shape = []int{math.MaxInt / 2}; t.Data = nil }), `tensor "t.a": F32 shape [` + fmt.Sprint(math.MaxInt/2) + `] takes more than`},
		{"unknown type", nil, bad(func(t *tensor.Tensor) { t.Type = 99 }), `tensor "t.a" has unknown tensor type 99`},
		{"block", nil, bad(func(t *tensor.Tensor) { t.Type = tensor.Q4_0; t.Shape = []int{16, 2} }), `innermost dimension 16 is not a multiple of the Q4_0 block size 32`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, c.kvs, c.ts)
			wantErr(t, err, c.want)
			if !strings.HasPrefix(err.Error(), "gguf write: ") {
				t.Errorf("error %q lacks the gguf write prefix", err)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", buf.Len())
			}
		})
	}

	// A failing writer surfaces its error, naming where it struck.
	full := len(writeBytes(t, nil, good))
	err := Write(&limitWriter{left: full - 10}, nil, good)
	wantErr(t, err, `tensor "t.d": disk full`)
}

func TestOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	wantErr(t, err, "gguf "+dir+": ")
}
