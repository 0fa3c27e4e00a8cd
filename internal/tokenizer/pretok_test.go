package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func splitAll(p pretokenizer, text string) []string {
	var out []string
	for i := 0; i < len(text); {
		e := p(text, i)
		if e <= i {
			panic("pretokenizer made no progress")
		}
		out = append(out, text[i:e])
		i = e
	}
	return out
}

// TestSplitters pins hand-checked splits, chiefly \s+(?!\S): a run of spaces before a word gives
// its last space to the word, and a run at the end of text stays whole.
func TestSplitters(t *testing.T) {
	cases := []struct {
		name string
		p    pretokenizer
		in   string
		want []string
	}{
		{"llama3", splitLlama3, "a   b", []string{"a", "  ", " b"}},
		{"llama3", splitLlama3, "a b", []string{"a", " b"}},
		{"llama3", splitLlama3, "a   ", []string{"a", "   "}},
		{"llama3", splitLlama3, "a  \n  b", []string{"a", "  \n", " ", " b"}},
		{"llama3", splitLlama3, "x\n\n\ty", []string{"x", "\n\n", "\ty"}},
		{"llama3", splitLlama3, "1234567", []string{"123", "456", "7"}},
		{"llama3", splitLlama3, "I'M here's 'Sup x'Sup", []string{"I", "'M", " here", "'s", " '", "Sup", " x", "'S", "up"}},
		{"llama3", splitLlama3, "...\n\nok", []string{"...\n\n", "ok"}},
		{"llama3", splitLlama3, " !!x", []string{" !!", "x"}},
		{"llama3", splitLlama3, "\u00a0\u00a0z", []string{"\u00a0", "\u00a0z"}},
		{"llama3", splitLlama3, "a\xffb", []string{"a", "\xffb"}}, // invalid byte acts like punctuation
		{"qwen2", splitQwen2, "a 123", []string{"a", " ", "1", "2", "3"}},
		{"gpt2", splitGPT2, "a   b", []string{"a", "  ", " b"}},
		{"gpt2", splitGPT2, "I'M it's", []string{"I", "'", "M", " it", "'s"}},
		{"gpt2", splitGPT2, " 123 !? x\n\n", []string{" 123", " !?", " x", "\n\n"}},
		{"gpt2", splitGPT2, "a \n b", []string{"a", " \n", " b"}},
	}
	for _, c := range cases {
		if got := splitAll(c.p, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s split %q = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// splitterInputs is the corpus plus seeded random strings over characters at every class
// boundary: letters, digits of several scripts, apostrophes, each kind of whitespace, marks.
func splitterInputs(t *testing.T) []string {
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	// U+0085 and U+FEFF are left out on purpose: JavaScript's \s disagrees with Unicode's there.
	alphabet := []string{" ", " ", " ", "\n", "\r", "\t", "\v", "a", "Z", "s", "S", "l", "e", "1", "٣",
		"'", ".", "!", "中", "😀", "\u00a0", "\u3000", "é", "\u0301", "_", "-", "Ⅻ", "½"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		var sb strings.Builder
		for range r.IntN(16) {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		in = append(in, sb.String())
	}
	return in
}

// TestSplittersMatchRegex runs the published patterns in V8 (which has lookahead) and compares.
func TestSplittersMatchRegex(t *testing.T) {
	nodeRef(t)
	inputs := splitterInputs(t)
	path := filepath.Join(t.TempDir(), "inputs.json")
	raw, err := json.Marshal(inputs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama-bpe", "qwen2", "gpt2"} {
		p, _, err := pretokenizerFor(name)
		if err != nil {
			t.Fatal(err)
		}
		var want [][]string
		if err := json.Unmarshal(runNode(t, "split", name, path), &want); err != nil {
			t.Fatalf("%s: reference output: %v", name, err)
		}
		bad := 0
		for i, s := range inputs {
			if got := splitAll(p, s); !slices.Equal(got, want[i]) && bad < 10 {
				bad++
				t.Errorf("%s split %q:\n go  %q\n ref %q", name, s, got, want[i])
			}
		}
	}
}
