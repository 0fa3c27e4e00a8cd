package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// withScore returns a copy of the llama2.c tokenizer data with token id's
// score set to v.
func withScore(t *testing.T, data []byte, id int, v float32) []byte {
	t.Helper()
	out := slices.Clone(data)
	off := 4
	for i := 0; i < id; i++ {
		off += 8 + int(binary.LittleEndian.Uint32(out[off+4:]))
	}
	binary.LittleEndian.PutUint32(out[off:], math.Float32bits(v))
	return out
}

// A NaN score compares false with everything, so the merge order that
// scores decide would depend on the heap's history, not on the vocabulary.
// Such a vocabulary is refused, naming the token, whether it comes from a
// llama2.c file or from a GGUF file's tokenizer.ggml.scores.
func TestNaNScoreRefused(t *testing.T) {
	nan := float32(math.NaN())
	if _, err := FromLlama2C(withScore(t, embedded.Tokenizer, 300, nan), 512); err == nil ||
		!strings.Contains(err.Error(), "token 300") || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("llama2.c file with a NaN score: err = %v", err)
	}
	for _, id := range []int{0, 2, 3 + 0x41, 511} { // unknown, control, byte, normal
		s := tok512(t).Spec() // as model.Load describes a GGUF llama vocabulary
		s.Scores[id] = nan
		_, err := New(s)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("token %d ", id)) || !strings.Contains(err.Error(), "NaN") {
			t.Fatalf("NaN score at %d: err = %v", id, err)
		}
	}
	// A GPT-2 vocabulary does not merge by score: its scores are not read.
	g := tinyGPT2("default")
	g.Scores = make([]float32, len(g.Tokens))
	g.Scores[3] = nan
	if _, err := New(g); err != nil {
		t.Fatalf("gpt2 vocabulary with an unused NaN score: %v", err)
	}
}

// Infinite scores still order: llama.cpp's converters write -1000 or 0
// for pieces that should not merge early, and an infinity is just further
// along the same line. -Inf merges last, +Inf first, ties leftmost.
func TestInfiniteScoresOrder(t *testing.T) {
	base := tok512(t)
	text := "Once upon a time there was a little cat"
	for _, v := range []float32{float32(math.Inf(-1)), float32(math.Inf(1)), -1000, 0} {
		s := base.Spec()
		for i := 3 + 256; i < len(s.Scores); i += 7 {
			s.Scores[i] = v
		}
		tk, err := New(s)
		if err != nil {
			t.Fatalf("scores %v: %v", v, err)
		}
		ids := tk.Encode(text, true)
		if got := tk.Decode(ids); got != " "+text && got != text {
			t.Fatalf("scores %v: round trip %q", v, got)
		}
		for range 3 { // the same vocabulary always gives the same ids
			if again := tk.Encode(text, true); !slices.Equal(again, ids) {
				t.Fatalf("scores %v: %v then %v", v, ids, again)
			}
		}
	}
}
