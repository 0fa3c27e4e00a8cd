// Package modeltest writes the embedded model out as files, and changes
// them, for the tests of the servers that load a model from a file. It is
// imported by tests only, and must never be by a command or a server.
package modeltest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// Files writes the embedded model's llama2.c checkpoint and tokenizer
// into a temporary directory of t and returns their paths (config.Model
// and config.Tokenizer).
func Files(t testing.TB) (ckpt, tok string) {
	t.Helper()
	dir := t.TempDir()
	ckpt, tok = filepath.Join(dir, "model.bin"), filepath.Join(dir, "tokenizer.bin")
	for path, data := range map[string][]byte{ckpt: embedded.Checkpoint, tok: embedded.Tokenizer} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ckpt, tok
}

// Touch moves path's modification time a second ahead, as a write in
// place would, without changing its bytes.
func Touch(t testing.TB, path string) {
	t.Helper()
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// WantStopped waits for a server's Run to return after its model file
// was changed: it fails t unless Run returns model.ErrFileModified within
// within.
func WantStopped(t testing.TB, done <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, model.ErrFileModified) {
			t.Fatalf("Run returned %v; want model.ErrFileModified", err)
		}
	case <-time.After(within):
		t.Fatalf("still running %v after its model file was modified", within)
	}
}

// WantRunning fails t if Run returns within d: the server must go on
// while its model file is untouched.
func WantRunning(t testing.TB, done <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Run ended with the model file untouched: %v", err)
	case <-time.After(d):
	}
}
