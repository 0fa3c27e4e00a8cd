package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// flooder answers every request with 200 and then writes line for ever,
// until the client goes away, after head (once) and with contentType.
func flooder(t *testing.T, contentType, head, line string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(http.StatusOK)
		if _, err := fmt.Fprint(w, head); err != nil {
			return
		}
		buf := []byte(strings.Repeat(line, 64))
		for r.Context().Err() == nil {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFloodingServerFailsTheStream: a server that sends more than a
// stream can hold (content past max_tokens, a stream of comments that
// never ends, a huge body that is not a stream) fails that request with a
// stream error naming the bound as soon as the bound is passed, rather
// than growing the client's memory until --timeout. The timeout here is
// far longer than the test may take, so a run that waited for it fails.
func TestFloodingServerFailsTheStream(t *testing.T) {
	chunk := `data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}` + "\n\n"
	cases := []struct {
		name string
		srv  *httptest.Server
		want string
	}{
		{"content past max_tokens", flooder(t, "text/event-stream", "", chunk), "chunks with content"},
		{"endless comments", flooder(t, "text/event-stream", chunk, ": keep-alive\n"), "bytes"},
		{"huge JSON body", flooder(t, "application/json", `{"choices":[`+"\n", `{"text":"aaaaaaaa"},`+"\n"), "bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(c.srv.URL)
			cfg.Model, cfg.Requests, cfg.MaxTokens = "m", 2, 8
			cfg.Timeout = time.Minute
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rep, err := Run(ctx, cfg)
			if err != nil {
				t.Fatalf("run: %v (a flood held the request until the deadline?)", err)
			}
			l := rep.Levels[0]
			if l.Errors.StreamError != 2 || l.Failed != 2 {
				t.Fatalf("errors %+v, want 2 stream errors (samples %v)", l.Errors, l.ErrorSamples)
			}
			if s := l.ErrorSamples["stream_error"]; !strings.Contains(s, c.want) {
				t.Errorf("sample %q does not name the bound (%q)", s, c.want)
			}
		})
	}
}

// TestStreamKeepsBoundedGaps: do keeps at most the chunk bound's gaps from
// a flooding stream, and a finish_reason of any length is kept short.
func TestStreamKeepsBoundedGaps(t *testing.T) {
	chunk := `data: {"choices":[{"text":"a","finish_reason":"` + strings.Repeat("x", 100000) + `"}]}` + "\n\n"
	srv := flooder(t, "text/event-stream", "", chunk)
	lim := limitsFor(4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := do(ctx, srv.Client(), srv.URL, "", []byte("{}"), lim)
	if r.class != StreamError || len(r.gaps) >= lim.chunks || len(r.finish) > maxFinishBytes+len("…") {
		t.Errorf("class %v (%s), %d gaps kept (bound %d), finish_reason of %d bytes", r.class, r.msg, len(r.gaps), lim.chunks, len(r.finish))
	}
}
