package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
			tb.Fatalf("Llama 3 reference unavailable under CI: %s", missing)
		}
		tb.Skipf("Llama 3 reference unavailable: %s", missing)
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
