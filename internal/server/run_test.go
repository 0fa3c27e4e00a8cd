package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// startRun builds a server for cfg and runs it on a loopback listener
// with drain; it returns the base URL, the cancel that starts shutdown,
// and Run's result.
func startRun(t *testing.T, cfg *config.Config, drain time.Duration) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ended := make(chan error, 1), make(chan struct{})
	go func() { done <- s.Run(ctx, ln, drain); close(ended) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	return "http://" + ln.Addr().String(), cancel, done
}

// TestDrainTimeoutEndsStreamsWithAnError: streams still running when the
// drain time runs out are failed by the engine, and each client must
// read that error; cutting the connection at the same moment leaves a
// stream that just stops, which a client cannot tell from a network
// fault, or worse, from the end of a short answer.
func TestDrainTimeoutEndsStreamsWithAnError(t *testing.T) {
	cfg := config.Default()
	cfg.Threads, cfg.MaxSequences = 1, 64
	url, stop, done := startRun(t, cfg, time.Millisecond)
	const n = 16
	lasts := startStreams(t, url, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":400,"temperature":0,"stream":true}`, n)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	cut := 0
	for i := 0; i < n; i++ {
		if last := <-lasts; last != "data: [DONE]" && !strings.Contains(last, `"error"`) {
			cut++
			t.Logf("stream ended with %q", last)
		}
	}
	if cut > 0 {
		t.Fatalf("%d of %d streams were cut off without an error or [DONE]", cut, n)
	}
}

// startStreams posts n streaming requests with body to url's completions
// and returns once each has sent its first line (or failed). Each sends
// its last non-empty line on the channel when it ends, or its error.
func startStreams(t *testing.T, url, body string, n int) <-chan string {
	t.Helper()
	lasts := make(chan string, n)
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		go func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				started.Done()
				lasts <- "post: " + err.Error()
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
			if err := sc.Err(); err != nil {
				last += " (read: " + err.Error() + ")"
			}
			lasts <- last
		}()
	}
	started.Wait()
	return lasts
}

// TestSlowBodyIsCutOff: a client that sends its headers and then only
// part of the body it announced is disconnected once the read timeout
// passes, with or without a valid key, rather than holding its connection
// and goroutine for as long as it likes.
func TestSlowBodyIsCutOff(t *testing.T) {
	readTimeout = 300 * time.Millisecond
	defer func() { readTimeout = ReadTimeout }()
	cfg := config.Default()
	cfg.Tenants = []config.Tenant{{Name: "acme", APIKeys: []string{"sk-acme-0123456789abcdef"}}}
	cfg.Auth, cfg.MaxBodyBytes = config.AuthAPIKey, 1024 // 1024: the timeout stays readTimeout
	url, _, _ := startRun(t, cfg, time.Second)
	for _, key := range []string{"sk-acme-0123456789abcdef", "sk-wrong"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"prompt\":", key)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = io.Copy(io.Discard, c)
		if err != nil {
			t.Fatalf("key %s: the connection was still open after %v: %v", key, time.Since(start).Round(time.Millisecond), err)
		}
	}
}

// TestReadTimeoutScalesWithBodyLimit: a larger max_body_bytes gets a
// read timeout long enough to upload it at MinBodyRate.
func TestReadTimeoutScalesWithBodyLimit(t *testing.T) {
	if got := ReadTimeoutFor(1 << 20); got != 64*time.Second {
		t.Errorf("1 MiB: %v", got)
	}
	if got := ReadTimeoutFor(1024); got != ReadTimeout {
		t.Errorf("1 KiB: %v", got)
	}
	if got := ReadTimeoutFor(64 << 20); got != 4096*time.Second {
		t.Errorf("64 MiB: %v", got)
	}
}
