package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// TestEncodeParts: a chat prompt encoded from parts is the prompt encoded
// as one string. Where no user part spells a special token the ids are
// EncodeSpecial's of the whole text; where one does, that part's special
// strings stay text and the ids are Encode's, with no extra SentencePiece
// space at the seams and merges across them (the per-part encoding before
// it added a space token before every part).
func TestEncodeParts(t *testing.T) {
	tok := tok512(t)
	if got := tok.EncodeSpecial("</s>", false); len(got) != 1 {
		t.Fatalf("the test needs </s> as a special token; EncodeSpecial gave %v", got)
	}
	cases := [][]Part{
		{{Text: "[INST] ", Trusted: true}, {Text: "Once upon a time"}, {Text: " [/INST]", Trusted: true}},
		{{Text: "Once upon a ti"}, {Text: "me there was"}, {Text: " a dog</s>", Trusted: true}, {Text: "Lily"}},
		{{Text: "</s>", Trusted: true}, {Text: " and then"}, {Text: "", Trusted: true}, {Text: "</s></s>", Trusted: true}},
		{{Text: ""}},
	}
	for _, parts := range cases {
		var full strings.Builder
		for _, p := range parts {
			full.WriteString(p.Text)
		}
		for _, bos := range []bool{false, true} {
			if got, want := tok.EncodeParts(parts, bos), tok.EncodeSpecial(full.String(), bos); !slices.Equal(got, want) {
				t.Errorf("%q (bos %v): EncodeParts %v, EncodeSpecial %v", full.String(), bos, got, want)
			}
		}
	}
	// A user who types </s> gets text, encoded as the whole string is.
	parts := []Part{{Text: "[INST] ", Trusted: true}, {Text: "Once upon a time</s>"}, {Text: " [/INST]", Trusted: true}}
	got, want := tok.EncodeParts(parts, true), tok.Encode("[INST] Once upon a time</s> [/INST]", true)
	if !slices.Equal(got, want) {
		t.Fatalf("untrusted </s>: EncodeParts %v, want Encode's %v", got, want)
	}
	if slices.Contains(got, tok.EncodeSpecial("</s>", false)[0]) {
		t.Fatalf("a user's </s> became the special token: %v", got)
	}
}
