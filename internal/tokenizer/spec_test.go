package tokenizer

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tinyGPT2 is a byte-level vocabulary: the 256 byte pieces, then merged pieces.
func tinyGPT2(pre string) Spec {
	var toks []string
	for b := 0; b < 256; b++ {
		toks = append(toks, ByteLevel([]byte{byte(b)}))
	}
	toks = append(toks, "ab", "abc", "Ġa", "<|end|>", "<tool>")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TypeNormal
	}
	types[259] = TypeControl
	types[260] = TypeUserDefined
	return Spec{Model: ModelGPT2, Pre: pre, Tokens: toks, Types: types,
		Merges: []string{"a b", "ab c", "Ġ a"}, BOS: -1, EOS: 259, UNK: -1, PAD: -1}
}

func TestTinyGPT2(t *testing.T) {
	tk, err := New(tinyGPT2("default"))
	if err != nil {
		t.Fatal(err)
	}
	// Byte pieces sit at their byte value in this vocabulary.
	a, b, d, space := int('a'), int('b'), int('d'), int(' ')
	// "abc": a b (rank 0) then ab c (rank 1). " abd": "a b" outranks "Ġ a", so Ġ stays alone.
	want := []int{257, space, 256, d}
	if got := tk.Encode("abc abd", true); !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v (a=%d b=%d)", got, want, a, b)
	}
	if got := tk.Decode(tk.Encode("abc abd", false)); got != "abc abd" {
		t.Errorf("round trip %q", got)
	}
	// Encode leaves special text alone; EncodeSpecial maps control and user-defined strings.
	if got := tk.Encode("<|end|>", false); slices.Contains(got, 259) {
		t.Errorf("Encode mapped <|end|> to its id: %v", got)
	}
	if got := tk.EncodeSpecial("x<|end|><tool>y", false); !slices.Equal(got, []int{'x', 259, 260, 'y'}) {
		t.Errorf("EncodeSpecial = %v", got)
	}
	if got := tk.Decode([]int{'x', 259, 260}); got != "x<tool>" {
		t.Errorf("Decode hides control but shows user-defined: got %q", got)
	}
	if !tk.IsEnd(259) || tk.IsEnd(260) {
		t.Errorf("IsEnd(EOS)=%v IsEnd(user)=%v", tk.IsEnd(259), tk.IsEnd(260))
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for name, tk := range map[string]*Tokenizer{"tok512": tok512(t), "tiny": must(New(tinyGPT2("qwen2")))} {
		s := tk.Spec()
		again, err := New(s)
		if err != nil {
			t.Fatalf("%s: New(Spec()): %v", name, err)
		}
		if !reflect.DeepEqual(again.Spec(), s) {
			t.Errorf("%s: Spec does not round-trip", name)
		}
		for _, text := range roundTripCases {
			if a, b := tk.Encode(text, true), again.Encode(text, true); !slices.Equal(a, b) {
				t.Errorf("%s: %q encodes to %v, after round trip %v", name, text, a, b)
			}
		}
	}
	s := tok512(t).Spec()
	if s.Tokens[1] != "<s>" || s.Tokens[265] != "▁the" || s.Types[0] != TypeUnknown || s.Types[3] != TypeByte ||
		!s.AddBOS || !s.AddSpacePrefix || s.BOS != 1 || s.EOS != 2 || s.UNK != 0 || s.PAD != -1 {
		t.Errorf("FromLlama2C spec: tokens %q %q types %d %d flags %v %v ids %d %d %d %d",
			s.Tokens[1], s.Tokens[265], s.Types[0], s.Types[3], s.AddBOS, s.AddSpacePrefix, s.BOS, s.EOS, s.UNK, s.PAD)
	}
	s.Tokens[1] = "mutated" // Spec returns a copy
	if string(tok512(t).Piece(1)) != "<s>" {
		t.Error("Spec exposed internal state")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestNewErrors(t *testing.T) {
	base := tinyGPT2("default")
	cases := []struct {
		name string
		edit func(s *Spec)
		want string
	}{
		{"empty", func(s *Spec) { s.Tokens = nil; s.Types = nil }, "vocabulary is empty"},
		{"model", func(s *Spec) { s.Model = "wordpiece" }, `unknown model "wordpiece"`},
		{"pre", func(s *Spec) { s.Pre = "falcon" }, `unknown gpt2 pre-tokenizer "falcon"`},
		{"types", func(s *Spec) { s.Types = s.Types[:3] }, "3 token types for 261 tokens"},
		{"scores", func(s *Spec) { s.Scores = []float32{1} }, "1 scores for 261 tokens"},
		{"bos", func(s *Spec) { s.BOS = 261 }, "BOS id 261 is outside the vocabulary of 261 tokens"},
		{"eot", func(s *Spec) { s.EOT = []int{-1} }, "EOT[0] id -1"},
		{"addbos", func(s *Spec) { s.AddBOS = true }, "AddBOS is set but the vocabulary has no BOS"},
		{"type value", func(s *Spec) { s.Types[5] = 9 }, "has type 9"},
		{"merge form", func(s *Spec) { s.Merges = append(s.Merges, "abc") }, `merge 3 is "abc"`},
		{"merge left", func(s *Spec) { s.Merges = append(s.Merges, "zz a") }, `left piece "zz" is not a token`},
		{"merge result", func(s *Spec) { s.Merges = append(s.Merges, "b c") }, `merged piece "bc" is not a token`},
		{"byte", func(s *Spec) { s.Tokens[0] = "x<>" }, "no token for byte 0x00"},
		{"llama scores", func(s *Spec) { s.Model = ModelLlama }, "llama vocabulary has no scores"},
	}
	for _, c := range cases {
		s := base
		s.Tokens, s.Types, s.Merges = slices.Clone(base.Tokens), slices.Clone(base.Types), slices.Clone(base.Merges)
		c.edit(&s)
		_, err := New(s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
	spm := tok512(t).Spec()
	spm.Types[3+0x41] = TypeNormal // drop byte token 0x41 and the UNK it could fall back to
	spm.UNK = -1
	if _, err := New(spm); err == nil || !strings.Contains(err.Error(), "no byte token <0x41>") {
		t.Errorf("missing byte token: err = %v", err)
	}
}

func TestFromLlama2CErrors(t *testing.T) {
	data := tokData(t)
	cases := []struct {
		name string
		data []byte
		n    int
		want string
	}{
		{"short vocab", data, 100, "below 259"},
		{"truncated", data[:len(data)-3], 512, "has length"},
		{"header", data[:2], 512, "too short for its header"},
		{"extra", append(slices.Clone(data), 0), 512, "1 bytes after token 511"},
		{"wrong size", data, 511, "bytes after token 510"},
		// A corrupt checkpoint header's vocabulary size: refused before it sizes any table.
		{"huge vocab", data[:100], 1 << 30, "cannot hold 1073741824 tokens"},
	}
	for _, c := range cases {
		if _, err := FromLlama2C(c.data, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// TestConcurrentEncode shares one tokenizer (and its word cache) across goroutines; run with
// -race. Every goroutine must see the same ids as a single-threaded encode.
func TestConcurrentEncode(t *testing.T) {
	tk := must(New(tinyGPT2("llama-bpe")))
	want := map[string][]int{}
	for _, s := range roundTripCases {
		want[s] = tk.Encode(s, false)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 200 {
				s := roundTripCases[(g+k)%len(roundTripCases)]
				if got := tk.Encode(s, false); !slices.Equal(got, want[s]) {
					t.Errorf("goroutine %d: %q encoded to %v, want %v", g, s, got, want[s])
					return
				}
			}
		}()
	}
	wg.Wait()
}
