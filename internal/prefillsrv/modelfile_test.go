package prefillsrv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/modeltest"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// A prefill server whose model file is written in place stops, and Run
// returns the reason: its weights are mapped from the file and changed
// with it. It used to go on computing prompts' KV from them.
func TestStopsWhenTheModelFileIsWritten(t *testing.T) {
	auth, err := peerauth.NewPSK([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Threads = 1
	cfg.Model, cfg.Tokenizer = modeltest.Files(t)
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
	modeltest.WantRunning(t, done, 100*time.Millisecond)
	modeltest.Touch(t, cfg.Model)
	modeltest.WantStopped(t, done, 10*time.Second)
}
