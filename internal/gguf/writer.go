package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Version is the GGUF version Write produces.
const Version = 3

// Write writes a complete GGUF v3 file to w: header, the KVs in the given
// order, tensor descriptions, padding, and each tensor's data aligned to
// general.alignment (taken from kvs, where it must be a uint32, else 32).
//
// Everything is checked before the first byte is written: value types,
// duplicate keys and tensor names, shapes, types, and that each tensor's
// Data holds exactly the bytes its Type and Shape need. Only the header is
// built in memory; tensor data is streamed to w in order, so the output
// may be far larger than memory.
func Write(w io.Writer, kvs []KV, tensors []tensor.Tensor) error {
	header, align, sizes, err := encodeHeader(kvs, tensors)
	if err != nil {
		return fmt.Errorf("gguf write: %w", err)
	}
	for i := range tensors {
		if t := &tensors[i]; len(t.Data) != sizes[i] {
			return fmt.Errorf("gguf write: tensor %q: %s shape %v needs %d bytes, Data has %d", t.Name, t.Type, t.Shape, sizes[i], len(t.Data))
		}
	}
	return writeFile(w, header, align, tensors, sizes, func(i int) ([]byte, error) { return tensors[i].Data, nil })
}

// WriteFunc is Write for tensor data that does not exist yet: tensors
// describe the tensors (names, types and shapes; their Data is ignored)
// and data(i) produces tensor i's bytes when the writer reaches it. It is
// called once per tensor, in order, and its slice is written before the
// next call, so data may reuse one buffer. Only one tensor then needs to be
// in memory at a time, whatever the size of the model.
//
// The header and descriptions are checked before anything is written, but
// a data error, or a slice of the wrong size, can only show part way
// through: w then holds a truncated file, so write to a temporary file and
// rename it into place. An error from data is returned unwrapped.
func WriteFunc(w io.Writer, kvs []KV, tensors []tensor.Tensor, data func(i int) ([]byte, error)) error {
	header, align, sizes, err := encodeHeader(kvs, tensors)
	if err != nil {
		return fmt.Errorf("gguf write: %w", err)
	}
	return writeFile(w, header, align, tensors, sizes, data)
}

// writeFile writes the encoded header and then each tensor's data from
// data, padded to align, checking each against its size.
func writeFile(w io.Writer, header []byte, align int, tensors []tensor.Tensor, sizes []int, data func(i int) ([]byte, error)) error {
	cw := &countWriter{w: w}
	if _, err := cw.Write(header); err != nil {
		return fmt.Errorf("gguf write: header: %w", err)
	}
	if err := cw.pad(align); err != nil {
		return fmt.Errorf("gguf write: padding after header: %w", err)
	}
	for i := range tensors {
		t := &tensors[i]
		b, err := data(i)
		if err != nil {
			return err
		}
		if len(b) != sizes[i] {
			return fmt.Errorf("gguf write: tensor %q: %s shape %v needs %d bytes, got %d", t.Name, t.Type, t.Shape, sizes[i], len(b))
		}
		if _, err := cw.Write(b); err != nil {
			return fmt.Errorf("gguf write: tensor %q: %w", t.Name, err)
		}
		if err := cw.pad(align); err != nil {
			return fmt.Errorf("gguf write: padding after tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// encodeHeader validates the inputs and encodes everything before the
// tensor data: header, metadata and tensor descriptions. It returns the
// alignment and each tensor's data size, and ignores the tensors' Data.
func encodeHeader(kvs []KV, tensors []tensor.Tensor) ([]byte, int, []int, error) {
	le := binary.LittleEndian
	buf := []byte(magic)
	buf = le.AppendUint32(buf, Version)
	buf = le.AppendUint64(buf, uint64(len(tensors)))
	buf = le.AppendUint64(buf, uint64(len(kvs)))

	align := DefaultAlignment
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if seen[kv.Key] {
			return nil, 0, nil, fmt.Errorf("duplicate key %q", kv.Key)
		}
		seen[kv.Key] = true
		if kv.Key == AlignmentKey {
			// GGML reads this key as a uint32 and fails on anything else.
			a, ok := kv.Value.(uint32)
			if !ok {
				return nil, 0, nil, fmt.Errorf("%s is %s, want a uint32", AlignmentKey, describe(kv.Value))
			}
			if a == 0 || a&(a-1) != 0 || a > maxAlignment {
				return nil, 0, nil, fmt.Errorf("%s %d is not a power of two up to %d", AlignmentKey, a, maxAlignment)
			}
			align = int(a)
		}
		t, ok := typeOf(kv.Value)
		if !ok {
			return nil, 0, nil, fmt.Errorf("key %q: value of Go type %T has no GGUF type", kv.Key, kv.Value)
		}
		buf = appendString(buf, kv.Key)
		buf = le.AppendUint32(buf, uint32(t))
		var err error
		if buf, err = appendValue(buf, kv.Key, kv.Value, 0); err != nil {
			return nil, 0, nil, err
		}
	}

	names := make(map[string]bool, len(tensors))
	sizes := make([]int, len(tensors))
	var offset uint64 // of the next tensor, from the start of the data section
	for i := range tensors {
		t := &tensors[i]
		if names[t.Name] {
			return nil, 0, nil, fmt.Errorf("duplicate tensor name %q", t.Name)
		}
		names[t.Name] = true
		size, err := checkTensor(t)
		if err != nil {
			return nil, 0, nil, err
		}
		sizes[i] = size
		buf = appendString(buf, t.Name)
		buf = le.AppendUint32(buf, uint32(len(t.Shape)))
		for _, d := range t.Shape {
			buf = le.AppendUint64(buf, uint64(d))
		}
		buf = le.AppendUint32(buf, uint32(t.Type))
		buf = le.AppendUint64(buf, offset)
		offset += (uint64(size) + uint64(align) - 1) / uint64(align) * uint64(align)
	}
	return buf, align, sizes, nil
}

// checkTensor reports whether t can be described in a GGUF file, and
// returns the size in bytes its Type and Shape imply.
func checkTensor(t *tensor.Tensor) (int, error) {
	if len(t.Shape) < 1 || len(t.Shape) > 4 {
		return 0, fmt.Errorf("tensor %q has %d dimensions, want 1 to 4", t.Name, len(t.Shape))
	}
	if !t.Type.Known() {
		return 0, fmt.Errorf("tensor %q has unknown tensor type %d", t.Name, uint32(t.Type))
	}
	n := 1
	for k, d := range t.Shape {
		if d <= 0 {
			return 0, fmt.Errorf("tensor %q dimension %d is %d, want at least 1", t.Name, k, d)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, fmt.Errorf("tensor %q shape %v has too many elements", t.Name, t.Shape)
		}
		n = int(lo)
	}
	if t.Shape[0]%t.Type.BlockSize() != 0 {
		return 0, fmt.Errorf("tensor %q: innermost dimension %d is not a multiple of the %s block size %d",
			t.Name, t.Shape[0], t.Type, t.Type.BlockSize())
	}
	if n/t.Type.BlockSize() > math.MaxInt/t.Type.BlockBytes() {
		return 0, fmt.Errorf("tensor %q: %s shape %v takes more than %d bytes", t.Name, t.Type, t.Shape, math.MaxInt)
	}
	want, err := t.Type.RowBytes(n)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return want, nil
}

// countWriter counts bytes written so that padding can be computed without
// seeking.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

var zeros [4096]byte

// pad writes zero bytes up to the next multiple of align.
func (c *countWriter) pad(align int) error {
	rem := int((int64(align) - c.n%int64(align)) % int64(align))
	for rem > 0 {
		k := min(rem, len(zeros))
		if _, err := c.Write(zeros[:k]); err != nil {
			return err
		}
		rem -= k
	}
	return nil
}
