package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzSpec builds a vocabulary the way a GGUF file's tokenizer.ggml.* keys
// would give it: a base that New accepts (llama: <unk>, <s>, </s> and the
// 256 byte tokens; gpt2: the 256 byte-level pieces), then the extra tokens
// (newline-separated), with types and scores read from the fuzzer's
// bytes, the merges, and BOS/EOS/UNK from ids (16 bits each, minus one).
func fuzzSpec(llama bool, pre uint8, extra string, types, scores []byte, merges string, ids uint64) Spec {
	s := Spec{Model: ModelGPT2, BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	if llama {
		s.Model, s.AddSpacePrefix = ModelLlama, true
		s.Tokens = append(s.Tokens, "<unk>", "<s>", "</s>")
		s.Types = append(s.Types, TypeUnknown, TypeControl, TypeControl)
		for b := 0; b < 256; b++ {
			s.Tokens = append(s.Tokens, fmt.Sprintf("<0x%02X>", b))
			s.Types = append(s.Types, TypeByte)
		}
	} else {
		s.Pre = []string{"llama-bpe", "qwen2", "gpt2", "falcon"}[pre%4]
		for b := 0; b < 256; b++ {
			s.Tokens = append(s.Tokens, ByteLevel([]byte{byte(b)}))
			s.Types = append(s.Types, TypeNormal)
		}
		if merges != "" {
			s.Merges = strings.Split(merges, "\n")
		}
	}
	s.Scores = make([]float32, len(s.Tokens))
	if extra != "" {
		for i, tok := range strings.Split(extra, "\n") {
			ty := TypeNormal
			if i < len(types) {
				ty = int32(types[i] % 8) // 7 is out of range on purpose
			}
			var score float32
			if 4*i+4 <= len(scores) {
				score = math.Float32frombits(binary.LittleEndian.Uint32(scores[4*i:]))
			}
			s.Tokens, s.Types, s.Scores = append(s.Tokens, tok), append(s.Types, ty), append(s.Scores, score)
		}
	}
	s.BOS, s.EOS, s.UNK = int(ids&0xffff)-1, int(ids>>16&0xffff)-1, int(ids>>32&0xffff)-1
	s.AddBOS = s.BOS >= 0
	return s
}

// FuzzSpec: a vocabulary comes from a GGUF file's metadata, so any tokens,
// types, scores, merges and special ids give a tokenizer or an error, never
// a panic. A tokenizer built from them encodes any text to ids inside the
// vocabulary, with and without special tokens; Decode gives the text back
// (a byte-level vocabulary, or a llama one with every byte token, cannot
// lose a byte); and the streaming decoder agrees with Decode.
func FuzzSpec(f *testing.F) {
	f.Add(true, uint8(0), "▁a\n▁ab\nb\n<|eot|>\n<tool>", []byte{1, 1, 1, 3, 4}, []byte{0, 0, 128, 63, 0, 0, 0, 64}, "", uint64(2|3<<16|1<<32), "ab a<|eot|>b<tool>")
	f.Add(false, uint8(0), "ab\nabc\nĠa\n<|end|>\n<tool>", []byte{1, 1, 1, 3, 4}, []byte(nil), "a b\nab c\nĠ a", uint64(260<<16), "abc abd<|end|> it's <tool>")
	f.Add(false, uint8(1), "Ġ\nĠĠ\n12\n123", []byte(nil), []byte(nil), "Ġ Ġ\n1 2\n12 3", uint64(0), "  1234 x\n\n")
	f.Add(false, uint8(2), "\xc3\n\xa9\né", []byte(nil), []byte(nil), "\xc3 \xa9", uint64(0), "é \xc3\xa9")
	f.Add(true, uint8(0), "▁\n▁▁\nx", []byte{1, 4, 5}, []byte{0, 0, 192, 127}, "", uint64(0), "  x ▁")
	f.Fuzz(func(t *testing.T, llama bool, pre uint8, extra string, types, scores []byte, merges string, ids uint64, text string) {
		s := fuzzSpec(llama, pre, extra, types, scores, merges, ids)
		tk, err := New(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error %q lacks the tokenizer prefix", err)
			}
			return
		}
		n := tk.VocabSize()
		inRange := func(what string, out []int) {
			for _, id := range out {
				if id < 0 || id >= n {
					t.Fatalf("%s(%q) gave id %d outside a vocabulary of %d", what, text, id, n)
				}
			}
		}
		enc := tk.Encode(text, false)
		inRange("Encode", enc)
		inRange("EncodeSpecial", tk.EncodeSpecial(text, true))
		k := len(text) / 2
		inRange("EncodeParts", tk.EncodeParts([]Part{{text[:k], true}, {text[k:], false}}, true))

		got := tk.Decode(enc)
		want := text
		if llama && text != "" {
			want = " " + text // AddSpacePrefix, and no BOS before it to drop it
		}
		// A BOS that is also an ordinary piece drops the space of the piece after it, as after
		// a real BOS; only such a vocabulary may not give the text back.
		lossy := llama && slices.Contains(enc, tk.BOS())
		if want = sanitize([]byte(want)); got != want && !lossy {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q (ids %v)", text, got, want, enc)
		}
		d := tk.NewDecoder(-1)
		var stream strings.Builder
		for _, id := range enc {
			chunk := d.Add(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("%q: decoder emitted invalid UTF-8 %q", text, chunk)
			}
			stream.WriteString(chunk)
		}
		if stream.WriteString(d.Flush()); stream.String() != got {
			t.Fatalf("%q: stream %q, Decode %q", text, stream.String(), got)
		}
	})
}
