package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/modeltest"
)

// A model file written in place under a running server stops it at once,
// whatever the drain time: its weights changed with the file. Streams in
// flight end with an error event, never cut off, and Run returns the
// reason (serve then exits non-zero saying it).
func TestModelFileWrittenStopsServe(t *testing.T) {
	cfg := config.Default()
	cfg.Threads = 1
	cfg.Model, cfg.Tokenizer = modeltest.Files(t)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ModelCheckEvery = 10 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), ln, time.Minute) }()

	// Sixteen streams, batched on one thread, so that some are still
	// running when the change is seen, however fast the machine.
	const n = 16
	lasts := startStreams(t, "http://"+ln.Addr().String(), `{"model":"m","prompt":"Once upon a time","max_tokens":400,"temperature":0.8,"stream":true}`, n)
	modeltest.Touch(t, cfg.Model)
	modeltest.WantStopped(t, done, 15*time.Second)
	failed := 0
	for range n {
		switch last := <-lasts; {
		case strings.Contains(last, `"error"`):
			failed++
		case last != "data: [DONE]":
			t.Errorf("a stream was cut off: its last line was %q", last)
		}
	}
	if failed == 0 {
		t.Error("every stream finished: none was in flight when the file changed, or none was failed")
	}
}
