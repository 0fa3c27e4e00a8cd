package llama2c

import (
	"strings"
	"testing"
	"time"
)

// tiny is a well-formed checkpoint of the smallest sensible shape, its
// weights zero.
func tiny(shared bool) []byte {
	h := Header{Dim: 8, Hidden: 16, Layers: 2, Heads: 2, KVHeads: 1, Vocab: 12, SeqLen: 4, SharedClassifier: shared}
	n := h.Vocab*h.Dim + h.Layers*(2*h.Dim+2*h.Dim*h.Dim+2*h.Dim*h.KVDim()+3*h.Dim*h.Hidden) + h.Dim + 2*h.SeqLen*h.HeadDim()/2
	if !shared {
		n += h.Vocab * h.Dim
	}
	return append(EncodeHeader(h), make([]byte, 4*n)...)
}

func TestParseTiny(t *testing.T) {
	for _, shared := range []bool{true, false} {
		c, err := Parse("tiny", tiny(shared))
		if err != nil {
			t.Fatal(err)
		}
		want := 1 + 2*9 + 1
		if !shared {
			want++
		}
		if len(c.Tensors) != want || c.SharedClassifier != shared {
			t.Fatalf("shared=%v: %d tensors, shared %v; want %d", shared, len(c.Tensors), c.SharedClassifier, want)
		}
	}
	if _, err := Parse("cut", tiny(true)[:100]); err == nil || !strings.Contains(err.Error(), "end early") {
		t.Fatalf("a truncated checkpoint gave %v", err)
	}
}

// FuzzParse: a checkpoint is read from wherever the operator points
// --model; any bytes give a checkpoint whose tensors are views of exactly
// the bytes their shapes need, which together cover the file, or an error
// naming the file; never a panic. The corpus lives in
// testdata/fuzz/FuzzParse.
//
//	go test -run '^$' -fuzz FuzzParse ./internal/llama2c/
func FuzzParse(f *testing.F) {
	f.Add(tiny(true))
	f.Add(tiny(false))
	f.Add(tiny(true)[:HeaderBytes])
	f.Add([]byte("not a checkpoint at all, but long enough"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.bin", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "llama2c f.bin: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		total := HeaderBytes
		for _, tt := range c.Tensors {
			n := 4
			for _, d := range tt.Shape {
				n *= d
			}
			if len(tt.Data) != n {
				t.Fatalf("tensor %s %v has %d bytes, want %d", tt.Name, tt.Shape, len(tt.Data), n)
			}
			total += n
		}
		// The two RoPE tables are skipped, not returned.
		total += 4 * 2 * c.SeqLen * c.HeadDim() / 2
		if total != len(data) {
			t.Fatalf("tensors and tables cover %d of %d bytes", total, len(data))
		}
	})
}

// TestParseHugeHeader: a corrupt header that claims a million layers over
// a file of a few bytes is refused at the first tensor that does not fit,
// not after naming every layer's tensors (which took seconds). The bound
// is four orders of magnitude above the time the refusal takes.
func TestParseHugeHeader(t *testing.T) {
	h := Header{Dim: 4, Hidden: 2, Layers: 1 << 20, Heads: 2, KVHeads: 2, Vocab: 1, SeqLen: 1}
	data := append(EncodeHeader(h), make([]byte, 64)...)
	done := make(chan error, 1)
	go func() {
		_, err := Parse("huge.bin", data)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "blk.3.attn_norm.weight") {
			t.Fatalf("got %v, want the first tensor past the end named", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Parse of a 92-byte file claiming a million layers is still running after a second")
	}
}

// TestParseSizeOverflow: dim × vocab × 4 bytes is 2^34 here, which wraps
// to 0 in a 32-bit int; the first tensor must still be refused as not
// fitting the file, not accepted as empty (run with GOARCH=386 to see the
// wrap).
func TestParseSizeOverflow(t *testing.T) {
	h := Header{Dim: 1 << 16, Hidden: 2, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 1 << 16, SeqLen: 1, SharedClassifier: true}
	_, err := Parse("wrap.bin", append(EncodeHeader(h), make([]byte, 64)...))
	if err == nil || !strings.Contains(err.Error(), "token_embd.weight needs bytes [28, 17179869212)") {
		t.Fatalf("got %v, want token_embd.weight refused", err)
	}
}
