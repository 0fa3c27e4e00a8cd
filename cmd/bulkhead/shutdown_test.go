package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// TestServeGracefulShutdown: SIGTERM while streams are running lets them
// finish (within the drain time) and the process exits 0; a stream never
// ends silently truncated.
func TestServeGracefulShutdown(t *testing.T) {
	p := startServe(t, 64)
	c := p.client(tenantKeys["acme"])
	type result struct {
		text   string
		finish string
		err    error
	}
	results := make(chan result, 4)
	for i := 0; i < 4; i++ {
		go func() {
			st := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
				Model: "stories260K", Prompt: textPrompt("Once upon a time"), MaxTokens: openai.Int(200), Temperature: openai.Float(0),
			})
			var r result
			var b strings.Builder
			for st.Next() {
				if ch := st.Current(); len(ch.Choices) > 0 {
					b.WriteString(ch.Choices[0].Text)
					if f := ch.Choices[0].FinishReason; f != "" {
						r.finish = string(f)
					}
				}
			}
			r.text, r.err = b.String(), st.Err()
			results <- r
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		r := <-results
		switch {
		case r.err == nil && r.finish == "":
			t.Errorf("stream ended without a finish reason or an error after %d bytes", len(r.text))
		case r.err == nil && r.text == "":
			t.Errorf("stream finished %q with no text", r.finish)
		}
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
		p.exited <- nil // let the cleanup see it
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit within 20s of SIGTERM")
	}
	// New requests are refused once shutdown began.
	if _, err := complete(context.Background(), c, textPrompt("Hi"), 3); err == nil {
		t.Fatal("a request succeeded after the server shut down")
	}
}
