package gguf

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// checkParse parses data and checks what a successful parse promises:
// every tensor lies inside data with exactly the bytes its type and shape
// need, and writing the file back out and parsing it again is stable.
func checkParse(t *testing.T, data []byte) {
	t.Helper()
	f, err := Parse(data)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "gguf: ") {
			t.Fatalf("error %q lacks the gguf prefix", err)
		}
		return
	}
	for _, tt := range f.Tensors {
		if offsetIn(data, tt.Data) < 0 {
			t.Fatalf("tensor %q data (%d bytes) is not inside the %d-byte input", tt.Name, len(tt.Data), len(data))
		}
		want, err := tt.Type.RowBytes(tt.Elements())
		if err != nil || want != len(tt.Data) {
			t.Fatalf("tensor %q %s %v has %d bytes, want %d (%v)", tt.Name, tt.Type, tt.Shape, len(tt.Data), want, err)
		}
	}
	var out bytes.Buffer
	if err := Write(&out, f.KVs, f.Tensors); err != nil {
		// The reader accepts any integer alignment; the writer insists on
		// the uint32 GGML needs. Nothing else may stop a rewrite.
		if v, ok := f.Get(AlignmentKey); ok {
			if _, u32 := v.(uint32); !u32 {
				return
			}
		}
		t.Fatalf("parsed file does not write back: %v", err)
	}
	g, err := Parse(out.Bytes())
	if err != nil {
		t.Fatalf("rewritten file does not parse: %v", err)
	}
	var again bytes.Buffer
	if err := Write(&again, g.KVs, g.Tensors); err != nil {
		t.Fatalf("second rewrite: %v", err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Fatalf("rewrite is not stable: %d bytes then %d", out.Len(), again.Len())
	}
}

// seedFiles are small valid files for the fuzzer to mutate.
func seedFiles(t testing.TB) [][]byte {
	one := []tensor.Tensor{{Name: "w", Type: tensor.F32, Shape: []int{2}, Data: make([]byte, 8)}}
	return [][]byte{
		writeBytes(t, nil, nil),
		writeBytes(t, []KV{{"general.architecture", "llama"}}, one),
		writeBytes(t, baseKVs(), sampleTensors(t)),
		writeBytes(t, []KV{{"a", []any{[]any{[]string{"x"}}, []int8{-1}}}, {"b", true}}, one),
	}
}

func FuzzParse(f *testing.F) {
	for _, b := range seedFiles(f) {
		f.Add(b)
		f.Add(b[:len(b)/2])
		c := bytes.Clone(b)
		c[len(c)/3] ^= 0xff
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, data)
	})
}

var genCorpus = flag.Bool("gen-corpus", false, "rewrite testdata/fuzz/FuzzParse from seedFiles")

// TestSeedCorpus checks the checked-in fuzz corpus still means what its
// names say: "valid-*" files parse, the others do not. With -gen-corpus it
// regenerates the generated entries first; crashers the fuzzer found are
// kept as they are.
func TestSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if *genCorpus {
		valid := writeBytes(t, []KV{{"general.architecture", "llama"}, {"a", []int32{1, 2}}},
			[]tensor.Tensor{{Name: "w", Type: tensor.F32, Shape: []int{2, 1}, Data: []byte{0, 0, 128, 63, 0, 0, 0, 64}}})
		f, err := Parse(valid)
		if err != nil {
			t.Fatal(err)
		}
		flipped := bytes.Clone(valid)
		flipped[bytes.LastIndexByte(valid[:f.DataOffset], 'w')+1] = 0xff // n_dims of "w"
		files := map[string][]byte{
			"valid-tiny":      valid,
			"valid-empty":     writeBytes(t, nil, nil),
			"truncated-half":  valid[:len(valid)/2],
			"truncated-data":  valid[:f.DataOffset+4],
			"corrupt-magic":   append([]byte("GGUX"), valid[4:]...),
			"corrupt-desc":    flipped,
			"corrupt-version": append(append([]byte("GGUF"), 1, 0, 0, 0), valid[8:]...),
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 5 {
		t.Fatalf("%s has %d entries, want the seed corpus", dir, len(entries))
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		data, err := decodeCorpus(raw)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		_, perr := Parse(data)
		switch {
		case strings.HasPrefix(e.Name(), "valid-") && perr != nil:
			t.Errorf("%s: %v", e.Name(), perr)
		case !strings.HasPrefix(e.Name(), "valid-") && perr == nil && !isCrasher(e.Name()):
			t.Errorf("%s parsed, want an error", e.Name())
		}
		checkParse(t, data)
	}
}

// isCrasher reports whether a corpus entry was found by the fuzzer (named
// by its hash) rather than generated, so may be valid.
func isCrasher(name string) bool { return !strings.Contains(name, "-") }

// decodeCorpus reads a one-value "go test fuzz v1" file holding []byte.
func decodeCorpus(raw []byte) ([]byte, error) {
	s, ok := strings.CutPrefix(string(raw), "go test fuzz v1\n")
	if !ok {
		return nil, fmt.Errorf("no fuzz header")
	}
	s = strings.TrimSpace(s)
	s, ok = strings.CutPrefix(s, "[]byte(")
	if !ok || !strings.HasSuffix(s, ")") {
		return nil, fmt.Errorf("not a []byte value: %.40q", s)
	}
	out, err := strconv.Unquote(strings.TrimSuffix(s, ")"))
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}
