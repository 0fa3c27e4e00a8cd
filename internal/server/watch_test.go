package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// A model file written in place under a running server stops it at once,
// whatever the drain time: its weights changed with the file. Streams in
// flight end with an error event, never cut off, and Run returns the
// reason (serve then exits non-zero saying it).
func TestModelFileWrittenStopsServe(t *testing.T) {
	dir := t.TempDir()
	ckpt, tok := filepath.Join(dir, "m.bin"), filepath.Join(dir, "tok.bin")
	for path, data := range map[string][]byte{ckpt: embedded.Checkpoint, tok: embedded.Tokenizer} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Threads = 1
	cfg.Model, cfg.Tokenizer = ckpt, tok
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
	lasts := make(chan string, n)
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		go func() {
			body := `{"model":"m","prompt":"Once upon a time","max_tokens":400,"temperature":0.8,"stream":true}`
			resp, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				started.Done()
				lasts <- err.Error()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first, last := true, ""
			for sc.Scan() {
				if line := sc.Text(); line != "" {
					last = line
					if first {
						first = false
						started.Done()
					}
				}
			}
			if first {
				started.Done()
			}
			lasts <- last
		}()
	}
	started.Wait()
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(ckpt, later, later); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, model.ErrFileModified) {
			t.Fatalf("Run returned %v; want model.ErrFileModified", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after its model file was modified (with a minute's drain)")
	}
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
