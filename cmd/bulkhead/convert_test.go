package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// writeInputs puts the embedded checkpoint and tokenizer in dir, the
// checkpoint edited by mod, and returns their paths.
func writeInputs(t *testing.T, dir string, mod func(ckpt []byte)) (ckpt, tok string) {
	t.Helper()
	c := bytes.Clone(embedded.Checkpoint)
	if mod != nil {
		mod(c)
	}
	ckpt, tok = filepath.Join(dir, "model.bin"), filepath.Join(dir, "tok.bin")
	if err := os.WriteFile(ckpt, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, embedded.Tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	return ckpt, tok
}

// entries lists dir, to show that a failed conversion leaves nothing
// behind (no temporary file either).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// Flags the chosen source would ignore are usage errors: --tokenizer alone
// quietly converted the embedded model with the embedded tokenizer.
func TestConvertRefusesIgnoredFlags(t *testing.T) {
	dir := t.TempDir()
	_, tok := writeInputs(t, dir, nil)
	out := filepath.Join(dir, "out.gguf")
	for _, args := range [][]string{
		{"--tokenizer", tok},
		{"--random", "2M", "--tokenizer", tok},
		{"--seed", "7"},
	} {
		_, errOut, code := runCLI(t, append([]string{"convert", "--out", out}, args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("convert %v: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("convert %v wrote %s", args, out)
			os.Remove(out)
		}
	}
}

// --out naming an input is refused before anything is written: the
// conversion would replace the checkpoint with its GGUF.
func TestConvertRefusesToReplaceInput(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok := writeInputs(t, dir, nil)
	for _, out := range []string{ckpt, tok, filepath.Join(dir, ".", "model.bin")} {
		_, errOut, code := runCLI(t, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--out", out)
		if code != 2 || !strings.Contains(errOut, "is the input file") {
			t.Errorf("--out %s: exit %d, stderr %q; want a usage error", out, code, errOut)
		}
	}
	if b, err := os.ReadFile(ckpt); err != nil || !bytes.Equal(b, embedded.Checkpoint) {
		t.Errorf("the checkpoint changed (%v)", err)
	}
}

// Errors name the file they are about: the tokenizer that does not parse,
// and the output that cannot be written (not the temporary file, which the
// user never named and which no longer exists).
func TestConvertErrorsNameFiles(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok := writeInputs(t, dir, nil)
	if err := os.WriteFile(tok, embedded.Tokenizer[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--out", filepath.Join(dir, "x.gguf"))
	if code != 1 || !strings.Contains(errOut, tok+": ") {
		t.Errorf("bad tokenizer: exit %d, stderr %q; want it to name %s", code, errOut, tok)
	}

	out := filepath.Join(dir, "no", "such", "dir", "x.gguf")
	_, errOut, code = runCLI(t, "convert", "--out", out)
	if code != 1 || !strings.Contains(errOut, "writing "+out+": ") || strings.Contains(errOut, ".tmp") {
		t.Errorf("unwritable --out: exit %d, stderr %q; want it to name %s and no temporary file", code, errOut, out)
	}
}

// A checkpoint with a NaN weight is refused, naming the tensor and the
// place, and leaves no output and no temporary file behind; an existing
// output is kept.
func TestConvertRefusesNaNWeights(t *testing.T) {
	dir := t.TempDir()
	// Header (7 int32s), then the token embeddings: element 64·3 + 5 is
	// row 3, column 5 of token_embd.weight.
	ckpt, tok := writeInputs(t, dir, func(c []byte) {
		binary.LittleEndian.PutUint32(c[28+4*(64*3+5):], math.Float32bits(float32(math.NaN())))
	})
	out := filepath.Join(dir, "out.gguf")
	if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := entries(t, dir)
	for _, typ := range []string{"f32", "q8_0"} {
		_, errOut, code := runCLI(t, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--type", typ, "--out", out)
		want := `tensor "token_embd.weight": weight at row 3, column 5 is NaN`
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("--type %s: exit %d, stderr %q; want %q", typ, code, errOut, want)
		}
		if b, _ := os.ReadFile(out); string(b) != "previous" {
			t.Errorf("--type %s: the existing output was replaced", typ)
		}
		if after := entries(t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("--type %s: directory holds %v after the failure, was %v", typ, after, before)
		}
	}
}
