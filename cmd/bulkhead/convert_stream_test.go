package main

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// streamShape is a llama2.c shape of 56 MB of float32 whose largest tensor
// is 3 MB: big enough that holding the file in memory stands out from
// everything else a conversion holds, small enough to write and convert
// in well under a second. Its vocabulary is the embedded tokenizer's.
var streamShape = llama2c.Header{Dim: 512, Hidden: 1536, Layers: 4, Heads: 8, KVHeads: 8, Vocab: 512, SeqLen: 64, SharedClassifier: true}

// writeCheckpoint writes a llama2.c checkpoint of shape h (weights small
// and finite, repeating) and the embedded tokenizer into dir, and returns
// their paths and the checkpoint's size. The weights are streamed out, so
// the test itself never holds the file.
func writeCheckpoint(t testing.TB, dir string, h llama2c.Header) (ckpt, tok string, size int64) {
	t.Helper()
	floats := h.Vocab*h.Dim + h.Layers*(2*h.Dim+2*h.Dim*h.Dim+2*h.Dim*h.KVDim()+3*h.Dim*h.Hidden) +
		h.Dim + h.SeqLen*h.HeadDim()
	if !h.SharedClassifier {
		floats += h.Vocab * h.Dim
	}
	ckpt, tok = filepath.Join(dir, "big.bin"), filepath.Join(dir, "tok.bin")
	f, err := os.Create(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.Write(llama2c.EncodeHeader(h))
	pattern := make([]byte, 4*4093) // a prime, so rows do not all repeat
	for i := range 4093 {
		binary.LittleEndian.PutUint32(pattern[4*i:], math.Float32bits(float32(i%97-48)/1000))
	}
	for left := floats; left > 0; left -= len(pattern) / 4 {
		w.Write(pattern[:4*min(left, len(pattern)/4)])
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, embedded.Tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	return ckpt, tok, int64(llama2c.HeaderBytes + 4*floats)
}

// Converting a checkpoint memory-maps it instead of reading it into the
// heap: what a conversion allocates, in all, stays a small fraction of the
// checkpoint's size (F32 output writes the mapped weights as they are;
// Q8_0 holds one converted tensor at a time). Reading the checkpoint with
// os.ReadFile, as convert used to, allocates its whole size: a 7B
// checkpoint is 27 GB. Total allocation, unlike a sampled peak, does not
// depend on when the collector runs, so the bound holds on a busy machine.
func TestConvertCheckpointStreams(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok, size := writeCheckpoint(t, dir, streamShape)
	out := filepath.Join(dir, "out.gguf")
	for _, typ := range []string{"f32", "q8_0"} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, errOut, code := runCLI(t, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--type", typ, "--out", out)
		runtime.ReadMemStats(&after)
		if code != 0 {
			t.Fatalf("convert --type %s: exit %d: %s", typ, code, errOut)
		}
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("--type %s: a %d-byte checkpoint allocated %d bytes", typ, size, alloc)
		if alloc > size/4 {
			t.Errorf("--type %s: converting a %d-byte checkpoint allocated %d bytes; want under %d (the checkpoint must be mapped, not read)", typ, size, alloc, size/4)
		}
	}
}

// Serving a llama2.c checkpoint maps it as GGUF files are mapped: opening
// allocates a small fraction of its size, where reading it whole (as Open
// did) allocated all of it, beside the page cache's own copy.
func TestOpenCheckpointMaps(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok, size := writeCheckpoint(t, dir, streamShape)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := model.Open(ckpt, tok)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Dim != streamShape.Dim {
		t.Fatalf("loaded dim %d, want %d", m.Config.Dim, streamShape.Dim)
	}
	alloc := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("opening a %d-byte checkpoint allocated %d bytes", size, alloc)
	if alloc > size/4 {
		t.Fatalf("opening a %d-byte checkpoint allocated %d bytes; it should map the file, not read it", size, alloc)
	}
}
