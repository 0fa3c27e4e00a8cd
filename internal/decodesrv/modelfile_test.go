package decodesrv_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/decodesrv"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// A decode server whose model file is written in place stops, and Run
// returns the reason: its weights are mapped from the file and changed
// with it. It used to go on generating from them.
func TestStopsWhenTheModelFileIsWritten(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok := filepath.Join(dir, "m.bin"), filepath.Join(dir, "tok.bin")
	for path, data := range map[string][]byte{ckpt: embedded.Checkpoint, tok: embedded.Tokenizer} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	psk := config.Peers{Auth: config.PeerAuthPSK, PSKFile: filepath.Join(dir, "psk")}
	if err := peerauth.WritePSK(psk.PSKFile); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(psk)
	cfg.Model, cfg.Tokenizer = ckpt, tok
	dec, err := decodesrv.New(cfg, nil, decodesrv.Options{ModelCheckEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := peerauth.Load(psk)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := auth.ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kln, err := auth.Listen("tcp", "127.0.0.1:0", peerauth.RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- dec.Run(context.Background(), ln, kln) }()
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
