package gguf

import (
	"bytes"
	"errors"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// WriteFunc writes the bytes Write does, asks for each tensor's data only
// once the tensors before it are on w (so only one needs to exist at a
// time), and may be handed the same buffer every time.
func TestWriteFuncStreams(t *testing.T) {
	kvs, ts := allKVs(), sampleTensors(t)
	want := writeBytes(t, kvs, ts)

	descs := make([]tensor.Tensor, len(ts))
	for i, tt := range ts {
		descs[i] = tensor.Tensor{Name: tt.Name, Type: tt.Type, Shape: tt.Shape}
	}
	var out bytes.Buffer
	var scratch []byte
	next := 0
	err := WriteFunc(&out, kvs, descs, func(i int) ([]byte, error) {
		if i != next {
			t.Fatalf("data(%d) called, want data(%d)", i, next)
		}
		next++
		// Everything before tensor i is already written: its offset in
		// the finished file is where the output ends now, up to padding.
		if off := bytes.Index(want, ts[i].Data); off < out.Len() || off-out.Len() >= 64 {
			t.Errorf("data(%d) called with %d bytes written; the tensor starts at %d", i, out.Len(), off)
		}
		scratch = append(scratch[:0], ts[i].Data...)
		clear(ts[i].Data) // the writer must not read the originals
		return scratch, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("WriteFunc wrote %d bytes that differ from Write's %d", out.Len(), len(want))
	}
}

// A data error comes back as it was, and a slice of the wrong size is
// refused, naming the tensor.
func TestWriteFuncErrors(t *testing.T) {
	ts := sampleTensors(t)
	boom := errors.New("boom")
	err := WriteFunc(&bytes.Buffer{}, nil, ts, func(i int) ([]byte, error) {
		if i == 1 {
			return nil, boom
		}
		return ts[i].Data, nil
	})
	if err != boom {
		t.Errorf("got %v, want the data error itself", err)
	}
	err = WriteFunc(&bytes.Buffer{}, nil, ts, func(i int) ([]byte, error) { return ts[i].Data[:1], nil })
	wantErr(t, err, `gguf write: tensor "t.a": F32 shape [8 2] needs 64 bytes, got 1`)
}
