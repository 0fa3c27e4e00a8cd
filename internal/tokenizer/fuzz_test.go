package tokenizer

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// naiveLlama2C transcribes llama2.c's encoder: rescan all adjacent pairs and merge the best
// scoring one (leftmost on ties) until none is a piece. It reads tok512.bin on its own and is
// O(n²), an independent check on the heap-based merge engine.
type naiveLlama2C struct {
	ids    map[string]int
	pieces []string
	scores []float32
}

func newNaiveLlama2C(tb testing.TB) *naiveLlama2C {
	tb.Helper()
	data := embedded.Tokenizer
	n := &naiveLlama2C{ids: map[string]int{}}
	off := 4
	for i := 0; i < 512; i++ {
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		l := int(binary.LittleEndian.Uint32(data[off+4:]))
		off += 8
		p := string(data[off : off+l])
		off += l
		n.pieces = append(n.pieces, p)
		n.scores = append(n.scores, score)
		if i >= 3+256 { // llama2.c also searches specials and "<0xNN>", which no text can reach here
			n.ids[p] = i
		}
	}
	return n
}

func (n *naiveLlama2C) encode(text string) []int {
	var toks []int
	if text != "" {
		text = " " + text
	}
	for i := 0; i < len(text); {
		_, size := utf8.DecodeRuneInString(text[i:])
		if id, ok := n.ids[text[i:i+size]]; ok {
			toks = append(toks, id)
		} else {
			for k := i; k < i+size; k++ {
				toks = append(toks, int(text[k])+3)
			}
		}
		i += size
	}
	for {
		best, bestID, bestIdx := float32(-1e10), -1, -1
		for i := 0; i+1 < len(toks); i++ {
			if id, ok := n.ids[n.pieces[toks[i]]+n.pieces[toks[i+1]]]; ok && n.scores[id] > best {
				best, bestID, bestIdx = n.scores[id], id, i
			}
		}
		if bestIdx < 0 {
			return append([]int{1}, toks...)
		}
		toks[bestIdx] = bestID
		toks = slices.Delete(toks, bestIdx+1, bestIdx+2)
	}
}

// FuzzEncodeDecode checks on tok512, for any input: no panic; every id in range; Decode of the
// encoding gives the text back (invalid UTF-8 bytes as U+FFFD each); the streaming decoder
// agrees with Decode and emits only valid UTF-8; and short inputs encode exactly as llama2.c.
func FuzzEncodeDecode(f *testing.F) {
	tk := tok512(f)
	naive := newNaiveLlama2C(f)
	for _, s := range roundTripCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, true)
		for _, id := range ids {
			if id < 0 || id >= tk.VocabSize() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		want := sanitize([]byte(s))
		if got := tk.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q (ids %v)", s, got, want, ids)
		}
		d := tk.NewDecoder(-1)
		var stream []byte
		for _, id := range ids {
			chunk := d.Add(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("%q: decoder emitted invalid UTF-8 %q", s, chunk)
			}
			stream = append(stream, chunk...)
		}
		if stream = append(stream, d.Flush()...); string(stream) != want {
			t.Fatalf("%q: stream %q, want %q", s, stream, want)
		}
		if len(s) <= 256 {
			if ref := naive.encode(s); !slices.Equal(ids, ref) {
				t.Fatalf("Encode(%q) = %v, llama2.c gives %v (first difference at %d)", s, ids, ref, firstDiff(ids, ref))
			}
		}
		special := tk.EncodeSpecial(s, false)
		if got := tk.DecodeAfter(tk.BOS(), special); !utf8.ValidString(got) {
			t.Fatalf("EncodeSpecial(%q) decodes to invalid UTF-8 %q", s, got)
		}
	})
}

// FuzzByteLevel checks the byte-level path on any input: each splitter cuts the text into
// non-empty pieces that add back up to it, and the tiny vocabulary round-trips every byte.
func FuzzByteLevel(f *testing.F) {
	tk := must(New(tinyGPT2("llama-bpe")))
	for _, s := range roundTripCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range []string{"llama-bpe", "qwen2", "gpt2"} {
			p, _, _ := pretokenizerFor(name)
			var joined string
			for i := 0; i < len(s); {
				e := p(s, i)
				if e <= i || e > len(s) {
					t.Fatalf("%s at %d of %q returned end %d", name, i, s, e)
				}
				joined += s[i:e]
				i = e
			}
			if joined != s {
				t.Fatalf("%s pieces of %q join to %q", name, s, joined)
			}
		}
		if got, want := tk.Decode(tk.Encode(s, false)), sanitize([]byte(s)); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}
