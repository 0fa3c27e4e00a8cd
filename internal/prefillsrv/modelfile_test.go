package prefillsrv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// A prefill server whose model file is written in place stops, and Run
// returns the reason: its weights are mapped from the file and changed
// with it. It used to go on computing prompts' KV from them.
func TestStopsWhenTheModelFileIsWritten(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok := filepath.Join(dir, "m.bin"), filepath.Join(dir, "tok.bin")
	for path, data := range map[string][]byte{ckpt: embedded.Checkpoint, tok: embedded.Tokenizer} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := peerauth.NewPSK([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Threads = 1
	cfg.Model, cfg.Tokenizer = ckpt, tok
	s, err := New(cfg, nil, Options{Auth: auth, ModelCheckEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := auth.ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), ln) }()
	select {
	case err := <-done:
		t.Fatalf("Run ended with the file untouched: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(ckpt, later, later); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, model.ErrFileModified) {
			t.Fatalf("Run returned %v; want model.ErrFileModified", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after its model file was modified")
	}
}
