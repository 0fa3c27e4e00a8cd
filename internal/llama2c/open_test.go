package llama2c

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
)

// Open gives the tensors Parse gives for the same bytes, and its errors
// name the file once.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	data := tiny(false)
	for i := HeaderBytes; i < len(data); i++ {
		data[i] = byte(i)
	}
	path := filepath.Join(dir, "tiny.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Header != want.Header || len(c.Tensors) != len(want.Tensors) {
		t.Fatalf("Open: %+v with %d tensors, Parse: %+v with %d", c.Header, len(c.Tensors), want.Header, len(want.Tensors))
	}
	for i, tt := range c.Tensors {
		w := want.Tensors[i]
		if tt.Name != w.Name || !bytes.Equal(tt.Data, w.Data) {
			t.Errorf("tensor %d: Open gives %s, Parse %s; data equal %v", i, tt.Name, w.Name, bytes.Equal(tt.Data, w.Data))
		}
		c.Evict(i) // a hint: the data stay readable
		if !bytes.Equal(tt.Data, w.Data) {
			t.Errorf("tensor %s changed after Evict", tt.Name)
		}
	}
	c.Evict(-1) // out of range: ignored
	c.Evict(len(c.Tensors))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	want.Evict(0) // from Parse: nothing to do
	if err := want.Close(); err != nil {
		t.Fatalf("Close of a parsed checkpoint: %v", err)
	}

	cut := filepath.Join(dir, "cut.bin")
	if err := os.WriteFile(cut, data[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.bin")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.bin"), "llama2c " + filepath.Join(dir, "missing.bin") + ": "},
		{cut, "llama2c " + cut + ": weights end early"},
		{empty, "llama2c " + empty + ": 0 bytes is shorter than"},
		{dir, "llama2c " + dir + ": "},
	} {
		_, err := Open(tc.path)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Count(err.Error(), tc.path) != 1 {
			t.Errorf("Open(%s): %v; want an error starting %q that names the file once", tc.path, err, tc.want)
		}
	}
}

// Open maps the file rather than reading it: opening a 32 MB checkpoint
// allocates next to nothing. A checkpoint read into memory is its whole
// size again (27 GB for a 7B model in float32).
func TestOpenDoesNotRead(t *testing.T) {
	if !mmapfile.Mapped {
		t.Skip("no mmap on this platform: Open reads the file")
	}
	h := Header{Dim: 256, Hidden: 512, Layers: 8, Heads: 4, KVHeads: 4, Vocab: 4096, SeqLen: 64, SharedClassifier: true}
	n := h.Vocab*h.Dim + h.Layers*(2*h.Dim+2*h.Dim*h.Dim+2*h.Dim*h.KVDim()+3*h.Dim*h.Hidden) + h.Dim + h.SeqLen*h.HeadDim()
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, append(EncodeHeader(h), make([]byte, 4*n)...), 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(HeaderBytes + 4*n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := Open(path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if alloc := int64(after.TotalAlloc - before.TotalAlloc); alloc > size/64 {
		t.Errorf("opening a %d-byte checkpoint allocated %d bytes; want under %d", size, alloc, size/64)
	}
}
