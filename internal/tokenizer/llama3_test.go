package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// llama3Dump is what tools/node/tokenizer-ref.mjs writes for "dump".
type llama3Dump struct {
	Tokens       []string `json:"tokens"`
	Merges       []string `json:"merges"`
	SpecialStart int      `json:"special_start"`
	BOS          int      `json:"bos"`
	EOS          int      `json:"eos"`
	EOT          []int    `json:"eot"`
}

// nodeRef locates node and the reference script, or skips the test (fails under CI=true, where
// the workflow installs them, so that a broken install cannot pass silently).
func nodeRef(tb testing.TB) (node, script string) {
	tb.Helper()
	root := repoRoot(tb)
	script = filepath.Join(root, "tools", "node", "tokenizer-ref.mjs")
	lib := filepath.Join(root, "tools", "node", "node_modules", "llama3-tokenizer-js")
	node, err := exec.LookPath("node")
	missing := ""
	if err != nil {
		missing = "node is not on PATH"
	} else if _, err := os.Stat(lib); err != nil {
		missing = lib + " is missing (run npm ci in tools/node)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("JavaScript reference (tools/node) unavailable under CI: %s", missing)
		}
		tb.Skipf("JavaScript reference (tools/node) unavailable: %s", missing)
	}
	return node, script
}

func runNode(tb testing.TB, args ...string) []byte {
	tb.Helper()
	node, script := nodeRef(tb)
	cmd := exec.Command(node, append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("node %s %v: %v\n%s", script, args, err, stderr.String())
	}
	return out
}

var llama3Once struct {
	sync.Once
	tk  *Tokenizer
	err error
}

// llama3 builds the Llama 3 tokenizer from the reference's vocabulary dump (9 MB, so it is
// produced at test time instead of being checked in). Built once per test binary.
func llama3(tb testing.TB) *Tokenizer {
	tb.Helper()
	nodeRef(tb)
	llama3Once.Do(func() {
		// Replaced on success; stays if runNode stops the first caller with Fatal.
		llama3Once.err = errors.New("the reference dump failed in an earlier test")
		dir, err := os.MkdirTemp("", "tokenizer-llama3-")
		if err != nil {
			llama3Once.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "llama3.json")
		runNode(tb, "dump", path)
		raw, err := os.ReadFile(path)
		if err != nil {
			llama3Once.err = err
			return
		}
		var d llama3Dump
		if err := json.Unmarshal(raw, &d); err != nil {
			llama3Once.err = err
			return
		}
		types := make([]int32, len(d.Tokens))
		for i := range types {
			types[i] = TypeNormal
			if i >= d.SpecialStart {
				types[i] = TypeControl
			}
		}
		llama3Once.tk, llama3Once.err = New(Spec{
			Model: ModelGPT2, Pre: "llama-bpe", Tokens: d.Tokens, Types: types, Merges: d.Merges,
			BOS: d.BOS, EOS: d.EOS, UNK: -1, PAD: -1, EOT: d.EOT, AddBOS: true,
		})
	})
	if llama3Once.err != nil {
		tb.Fatalf("building Llama 3 tokenizer from the reference dump: %v", llama3Once.err)
	}
	return llama3Once.tk
}

func TestLlama3MatchesReference(t *testing.T) {
	tk := llama3(t)
	corpusPath := filepath.Join("testdata", "corpus.json")
	raw, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatalf("%s: %v", corpusPath, err)
	}
	abs, err := filepath.Abs(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]int
	if err := json.Unmarshal(runNode(t, "encode", abs), &want); err != nil {
		t.Fatalf("reference output: %v", err)
	}
	if len(want) != len(corpus) {
		t.Fatalf("reference encoded %d strings, corpus has %d", len(want), len(corpus))
	}
	for i, s := range corpus {
		got := tk.Encode(s, false)
		if !slices.Equal(got, want[i]) {
			k := firstDiff(got, want[i])
			t.Errorf("corpus[%d] %q:\n go  %v\n ref %v\n first difference at index %d", i, s, got, want[i], k)
			continue
		}
		if back := tk.Decode(got); back != s {
			t.Errorf("corpus[%d]: Decode(Encode(%q)) = %q", i, s, back)
		}
	}
}

// TestLlama3Special checks the chat-template path: special strings become their ids only in
// EncodeSpecial, decode to nothing, and <|eot_id|> ends generation.
func TestLlama3Special(t *testing.T) {
	tk := llama3(t)
	const (
		bos, eos, startHeader, endHeader, eot = 128000, 128001, 128006, 128007, 128009
	)
	text := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
	got := tk.EncodeSpecial(text, false)
	var want []int
	want = append(want, bos, startHeader)
	want = append(want, tk.Encode("user", false)...)
	want = append(want, endHeader)
	want = append(want, tk.Encode("\n\nhi", false)...)
	want = append(want, eot)
	if !slices.Equal(got, want) {
		t.Errorf("EncodeSpecial:\n got  %v\n want %v", got, want)
	}
	plain := tk.Encode(text, true)
	if plain[0] != bos || slices.ContainsFunc(plain[1:], func(id int) bool { return id >= 128000 }) {
		t.Errorf("Encode let special text through as ids: %v", plain)
	}
	if s := tk.Decode(got); s != "user\n\nhi" {
		t.Errorf("Decode(EncodeSpecial) = %q, want specials hidden", s)
	}
	if string(tk.Piece(eot)) != "<|eot_id|>" {
		t.Errorf("Piece(eot) = %q", tk.Piece(eot))
	}
	if !tk.IsEnd(eot) || !tk.IsEnd(eos) || tk.IsEnd(bos) || tk.IsEnd(startHeader) {
		t.Error("IsEnd: want EOS and EOT only")
	}
}

// TestLlama3MergeEngine compares the heap-based merge engine with a plain rescan over the
// merge list by piece text, on the corpus and random strings (pre-tokens come from the splitter,
// checked separately against V8). It needs the vocabulary but no further node runs.
func TestLlama3MergeEngine(t *testing.T) {
	tk := llama3(t)
	spec := tk.Spec()
	rank := make(map[string]int, len(spec.Merges))
	for i, m := range spec.Merges {
		if _, ok := rank[m]; !ok {
			rank[m] = i
		}
	}
	id := make(map[string]int, len(spec.Tokens))
	for i, s := range spec.Tokens {
		id[s] = i
	}
	naive := func(text string) []int {
		var out []int
		for _, word := range splitAll(splitLlama3, text) {
			mapped := ByteLevel([]byte(word))
			if v, ok := id[mapped]; ok { // ignore_merges
				out = append(out, v)
				continue
			}
			var syms []string
			for _, r := range mapped {
				syms = append(syms, string(r))
			}
			for {
				best, at := -1, -1
				for i := 0; i+1 < len(syms); i++ {
					if r, ok := rank[syms[i]+" "+syms[i+1]]; ok && (best < 0 || r < best) {
						best, at = r, i
					}
				}
				if at < 0 {
					break
				}
				syms = slices.Replace(syms, at, at+2, syms[at]+syms[at+1])
			}
			for _, s := range syms {
				out = append(out, id[s])
			}
		}
		return out
	}
	for _, s := range splitterInputs(t) {
		// Long pre-tokens are where heap and rescan could diverge; make some.
		for _, text := range []string{s, strings.Repeat(s, 3), strings.ReplaceAll(s, " ", "")} {
			if got, want := tk.Encode(text, false), naive(text); !slices.Equal(got, want) {
				t.Fatalf("%q:\n heap   %v\n rescan %v\n first difference at %d", text, got, want, firstDiff(got, want))
			}
		}
	}
}

func BenchmarkEncodeLlama3(b *testing.B) {
	tk := llama3(b)
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		b.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(raw, &corpus); err != nil {
		b.Fatal(err)
	}
	text := strings.Join(corpus, "\n")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(text, true)
	}
}
