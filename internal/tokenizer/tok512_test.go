package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

func tokData(tb testing.TB) []byte { return embedded.Tokenizer }

func tok512(tb testing.TB) *Tokenizer {
	tb.Helper()
	t, err := FromLlama2C(embedded.Tokenizer, 512)
	if err != nil {
		tb.Fatalf("FromLlama2C: %v", err)
	}
	return t
}

// repoRoot walks up from the package directory to the directory holding go.mod.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// firstDiff is the first index where a and b differ, or the shorter length.
func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestTok512Golden(t *testing.T) {
	tk := tok512(t)
	f, err := os.Open(filepath.Join(repoRoot(t), "testdata", "stories260K-greedy.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		var g struct {
			Prompt       string `json:"prompt"`
			PromptTokens []int  `json:"prompt_tokens"`
			Completion   string `json:"completion"`
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("golden line %d: %v", lines+1, err)
		}
		lines++
		got := tk.Encode(g.Prompt, true)
		if !slices.Equal(got, g.PromptTokens) {
			i := firstDiff(got, g.PromptTokens)
			t.Errorf("Encode(%q):\n got  %v\n want %v\n first difference at index %d", g.Prompt, got, g.PromptTokens, i)
		}
		if back := tk.Decode(got); back != g.Prompt {
			t.Errorf("Decode(Encode(%q)) = %q", g.Prompt, back)
		}
		// Without BOS the space prefix stays in the text; after BOS it is dropped.
		ids := tk.Encode(g.Completion, false)
		if back := tk.Decode(ids); back != " "+g.Completion {
			t.Errorf("Decode(Encode(%q, false)) = %q, want the space prefix kept", g.Completion, back)
		}
		if back := tk.DecodeAfter(tk.BOS(), ids); back != g.Completion {
			t.Errorf("DecodeAfter(BOS, Encode(%q, false)) = %q", g.Completion, back)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines == 0 {
		t.Fatal("golden file has no lines")
	}
}

// roundTripCases mix ASCII with multi-byte text the 512-piece vocabulary does not know, so
// byte fallback and byte merging both get exercised.
var roundTripCases = []string{
	"", " ", "  ", "a", "Once upon a time", "  leading and trailing  ", "tab\tand\nnewline\r\n",
	"Ünïcödé façade", "日本語のテキスト", "한국어", "emoji 😀 and ZWJ 👩‍👩‍👧‍👦 and flag 🇩🇪",
	"<s> and </s> and <unk> as text", "<0x41> literal", "U+2581 ▁ is not a space", "\x00\x01",
	"\u200a hair space", "The dog's ball wasn't there.",
	// Overlapping equal-score pairs, where leftmost-first decides the result.
	"Hmmm... sooo cooool!!! zzz lll eee tttt aaaa", "ooooooo", "       x",
}

func TestTok512RoundTrip(t *testing.T) {
	tk := tok512(t)
	naive := newNaiveLlama2C(t)
	for _, s := range roundTripCases {
		ids := tk.Encode(s, true)
		if ref := naive.encode(s); !slices.Equal(ids, ref) {
			t.Errorf("Encode(%q) = %v, llama2.c gives %v (first difference at %d)", s, ids, ref, firstDiff(ids, ref))
		}
		if len(ids) == 0 || ids[0] != tk.BOS() {
			t.Errorf("Encode(%q, true) = %v, want BOS first", s, ids)
			continue
		}
		if got := tk.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
		if got := tk.Encode(s, false); !slices.Equal(got, ids[1:]) {
			t.Errorf("Encode(%q, false) = %v, want %v", s, got, ids[1:])
		}
		for _, id := range ids {
			if id < 0 || id >= tk.VocabSize() {
				t.Fatalf("Encode(%q) produced id %d outside the vocabulary", s, id)
			}
		}
	}
	if got := tk.Encode("", true); !slices.Equal(got, []int{1}) {
		t.Errorf("Encode(\"\", true) = %v, want [1] (no space prefix for empty text)", got)
	}
}

// TestTok512KnownIDs pins facts from the vocabulary file: the space prefix, byte fallback at
// byte+3, and special tokens encoded as plain text by Encode but as ids by EncodeSpecial.
func TestTok512KnownIDs(t *testing.T) {
	tk := tok512(t)
	if got := tk.Encode("\n", false); !slices.Equal(got, []int{410, '\n' + 3}) {
		t.Errorf("Encode(newline) = %v, want [410 13] (space piece, then byte fallback)", got)
	}
	if got := tk.Encode("é", false); !slices.Equal(got, []int{410, 485}) {
		t.Errorf("Encode(é) = %v, want [410 485] (é is a piece)", got)
	}
	if got := tk.Encode("ü", false); !slices.Equal(got, []int{410, 0xC3 + 3, 0xBC + 3}) {
		t.Errorf("Encode(ü) = %v, want space then byte tokens %d %d", got, 0xC3+3, 0xBC+3)
	}
	plain := tk.Encode("a</s>b", false)
	if slices.Contains(plain, 2) {
		t.Errorf("Encode treated </s> as EOS: %v", plain)
	}
	special := tk.EncodeSpecial("a</s>b", true)
	want := append(append([]int{1}, tk.Encode("a", false)...), 2)
	want = append(want, tk.Encode("b", false)...) // llama.cpp: a space prefix after a special token
	if !slices.Equal(special, want) {
		t.Errorf("EncodeSpecial(a</s>b) = %v, want %v", special, want)
	}
	if string(tk.Piece(1)) != "<s>" || string(tk.Piece(2)) != "</s>" || string(tk.Piece(3+'A')) != "A" {
		t.Errorf("pieces: %q %q %q", tk.Piece(1), tk.Piece(2), tk.Piece(3+'A'))
	}
	if tk.Decode([]int{1, 2}) != "" {
		t.Errorf("control tokens should decode to nothing, got %q", tk.Decode([]int{1, 2}))
	}
	if !tk.IsEnd(2) || !tk.IsEnd(1) || tk.IsEnd(0) || tk.IsEnd(300) {
		t.Errorf("IsEnd: EOS %v BOS %v UNK %v normal %v", tk.IsEnd(2), tk.IsEnd(1), tk.IsEnd(0), tk.IsEnd(300))
	}
}

// TestDecoderStreaming feeds text whose characters are split across byte tokens and checks that
// no output chunk ends inside a character and that the chunks add up to Decode.
func TestDecoderStreaming(t *testing.T) {
	tk := tok512(t)
	texts := []string{
		"emoji 😀👩‍👩‍👧‍👦🇯🇵 end", "中文和日本語、한국어", "mixed é 😀 x", "Once upon a time",
	}
	for _, s := range texts {
		ids := tk.Encode(s, true)
		for _, prev := range []int{-1, ids[0]} {
			feed := ids
			if prev >= 0 {
				feed = ids[1:]
			}
			d := tk.NewDecoder(prev)
			var sb []byte
			for i, id := range feed {
				chunk := d.Add(id)
				if !utf8.ValidString(chunk) {
					t.Fatalf("%q: chunk %d %q is not valid UTF-8", s, i, chunk)
				}
				sb = append(sb, chunk...)
			}
			sb = append(sb, d.Flush()...)
			if want := tk.DecodeAfter(prev, feed); string(sb) != want {
				t.Errorf("%q prev %d: stream %q, Decode %q", s, prev, sb, want)
			}
		}
		if got := tk.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
}

// TestDecoderSplitEveryByte feeds a string one byte token at a time, so every multi-byte
// character arrives split at every possible point.
func TestDecoderSplitEveryByte(t *testing.T) {
	tk := tok512(t)
	s := "a😀b中c👩‍👧é\u200a"
	ids := []int{}
	for i := 0; i < len(s); i++ {
		ids = append(ids, int(s[i])+3)
	}
	d := tk.NewDecoder(-1)
	var out string
	for i, id := range ids {
		chunk := d.Add(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("chunk after byte %d is %q, not valid UTF-8", i, chunk)
		}
		out += chunk
	}
	if rest := d.Flush(); rest != "" {
		t.Errorf("Flush after complete text = %q, want empty", rest)
	}
	if out != s || tk.Decode(ids) != s {
		t.Errorf("stream %q Decode %q, want %q", out, tk.Decode(ids), s)
	}
}

// TestDecoderInvalid checks that bytes that can never complete become U+FFFD, the same way in
// the stream and in Decode, and that a truncated character is released by Flush.
func TestDecoderInvalid(t *testing.T) {
	tk := tok512(t)
	b := func(bs ...byte) []int {
		var ids []int
		for _, x := range bs {
			ids = append(ids, int(x)+3)
		}
		return ids
	}
	cases := []struct {
		ids  []int
		want string
	}{
		{b(0xE4, 0xB8, 'a'), "\uFFFD\uFFFDa"}, // truncated 3-byte char, then ASCII
		{b(0xFF, 'x'), "\uFFFDx"},
		{b(0x80), "\uFFFD"},
		{b(0xF0, 0x9F, 0x98), "\uFFFD\uFFFD\uFFFD"}, // held until Flush
		{b(0xED, 0xA0, 0x80), "\uFFFD\uFFFD\uFFFD"}, // surrogate half is invalid in UTF-8
	}
	for _, c := range cases {
		d := tk.NewDecoder(-1)
		var out string
		for _, id := range c.ids {
			chunk := d.Add(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("%v: invalid chunk %q", c.ids, chunk)
			}
			out += chunk
		}
		out += d.Flush()
		if out != c.want || tk.Decode(c.ids) != c.want {
			t.Errorf("%v: stream %q Decode %q, want %q", c.ids, out, tk.Decode(c.ids), c.want)
		}
	}
}

func BenchmarkEncodeTok512(b *testing.B) {
	tk := tok512(b)
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
		"One day, she saw a big, red ball. She wanted to play with it, but it was too high. 日本語 😀\n"
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(text, true)
	}
}
