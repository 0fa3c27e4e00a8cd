package decodesrv_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/decodesrv"
	"github.com/bulkhead-llm/bulkhead/internal/modeltest"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// A decode server whose model file is written in place stops, and Run
// returns the reason: its weights are mapped from the file and changed
// with it. It used to go on generating from them.
func TestStopsWhenTheModelFileIsWritten(t *testing.T) {
	psk := config.Peers{Auth: config.PeerAuthPSK, PSKFile: filepath.Join(t.TempDir(), "psk")}
	if err := peerauth.WritePSK(psk.PSKFile); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(psk)
	cfg.Model, cfg.Tokenizer = modeltest.Files(t)
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
	modeltest.WantRunning(t, done, 100*time.Millisecond)
	modeltest.Touch(t, cfg.Model)
	modeltest.WantStopped(t, done, 10*time.Second)
}
