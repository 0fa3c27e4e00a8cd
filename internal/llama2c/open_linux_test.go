package llama2c

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Evict takes a tensor's pages out of the process's resident set: read
// once and evicted, a checkpoint's tensors leave next to nothing resident,
// where without Evict all of them would stay.
func TestEvictDropsPages(t *testing.T) {
	h := Header{Dim: 256, Hidden: 1024, Layers: 4, Heads: 4, KVHeads: 4, Vocab: 1024, SeqLen: 64, SharedClassifier: true}
	n := h.Vocab*h.Dim + h.Layers*(2*h.Dim+2*h.Dim*h.Dim+2*h.Dim*h.KVDim()+3*h.Dim*h.Hidden) + h.Dim + h.SeqLen*h.HeadDim()
	data := append(EncodeHeader(h), bytes.Repeat([]byte{1}, 4*n)...)
	path := filepath.Join(t.TempDir(), "m.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	data = nil
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := rssFile(t)
	var sum int
	for _, tt := range c.Tensors {
		for i := 0; i < len(tt.Data); i += 512 {
			sum += int(tt.Data[i])
		}
	}
	read := rssFile(t)
	for i := range c.Tensors {
		c.Evict(i)
	}
	evicted := rssFile(t)
	t.Logf("file-backed resident: %d bytes before, %d after reading a %d-byte checkpoint (sum %d), %d after Evict", base, read, size, sum, evicted)
	if read-base < size/2 {
		t.Skipf("reading the mapping added only %d bytes to RssFile; this kernel does not count it as expected", read-base)
	}
	if evicted-base > size/8 {
		t.Errorf("after Evict of every tensor, %d bytes of the %d-byte checkpoint are still resident; want under %d", evicted-base, size, size/8)
	}
}

// rssFile reads this process's file-backed resident memory.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(fmt.Errorf("RssFile line %q: %w", line, err))
			}
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}
