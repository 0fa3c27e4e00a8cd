package loadgen

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// behaviour is what the fake server does with one request.
type behaviour int

const (
	bOK         behaviour = iota
	b500                  // status 500 with an OpenAI-style error body
	bErrData              // a few chunks, then a chunk with an "error" member
	bErrEvent             // a few chunks, then "event: error"
	bDrop                 // a few chunks, then the connection is cut
	bNoFinish             // chunks and [DONE], but no finish_reason
	bNoDone               // a complete stream without [DONE], cleanly closed
	bAbort                // finish_reason "abort"
	bHangStream           // one chunk, then nothing until the client gives up
	bHangHeader           // nothing at all until the client gives up
)

// fakeServer speaks the streaming side of the OpenAI API: it emits
// chunks content chunks, firstDelay before the first and gap between the
// others, then a finish chunk, a usage chunk and [DONE].
type fakeServer struct {
	t          *testing.T
	chunks     int
	firstDelay time.Duration
	gap        time.Duration
	apiKey     string // when set, requests must carry it
	noUsage    bool
	// plan picks each request's behaviour from its arrival number;
	// nil means every request succeeds.
	plan func(n int) behaviour
	// barrier, when set, holds requests in waves of that many: each
	// waits until its whole wave has arrived (or a second passes), so a
	// test can see full concurrency.
	barrier int

	mu          sync.Mutex
	cond        *sync.Cond
	arrivals    int
	inflight    int
	maxInflight int
	bodies      []map[string]any
	paths       []string
}

func startFake(t *testing.T, f *fakeServer) *httptest.Server {
	t.Helper()
	f.t = t
	f.cond = sync.NewCond(&f.mu)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

// prompts returns the prompt text of every request seen.
func (f *fakeServer) prompts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.bodies {
		out = append(out, promptOf(b))
	}
	return out
}

func promptOf(b map[string]any) string {
	if p, ok := b["prompt"].(string); ok {
		return p
	}
	if ms, ok := b["messages"].([]any); ok && len(ms) > 0 {
		m, _ := ms[0].(map[string]any)
		c, _ := m["content"].(string)
		return c
	}
	return ""
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+f.apiKey {
		http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
		return
	}
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"},{"id":"other"}]}`)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if !chat && r.URL.Path != "/v1/completions" {
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	f.mu.Lock()
	n := f.arrivals
	f.arrivals++
	f.bodies = append(f.bodies, body)
	f.paths = append(f.paths, r.URL.Path)
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.cond.Broadcast()
	if f.barrier > 0 {
		deadline := time.Now().Add(time.Second)
		t := time.AfterFunc(time.Second, func() { f.mu.Lock(); f.cond.Broadcast(); f.mu.Unlock() })
		// Waves, not a count of requests in flight: a request that ends
		// early would let the count drop and strand the others.
		for f.arrivals < (n/f.barrier+1)*f.barrier && time.Now().Before(deadline) {
			f.cond.Wait()
		}
		t.Stop()
	}
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inflight--; f.mu.Unlock() }()

	b := bOK
	if f.plan != nil {
		b = f.plan(n)
	}
	switch b {
	case b500:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"the engine fell over","type":"internal"}}`)
		return
	case bHangHeader:
		<-r.Context().Done()
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flush := func() { http.NewResponseController(w).Flush() }
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		flush()
	}
	choice := func(text string, finish any) map[string]any {
		c := map[string]any{"index": 0, "finish_reason": finish}
		if chat {
			c["delta"] = map[string]any{"content": text}
		} else {
			c["text"] = text
		}
		return map[string]any{"id": "x", "choices": []any{c}}
	}
	if chat {
		// A role-only first chunk carries no token: it must not stop
		// the TTFT clock.
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant"}, "finish_reason": nil}}})
		fmt.Fprint(w, ": keep-alive comment\n\n")
		flush()
	}
	time.Sleep(f.firstDelay)
	for i := range f.chunks {
		if i > 0 {
			time.Sleep(f.gap)
		}
		send(choice(fmt.Sprintf(" tok%d", i), nil))
		if i == 1 {
			switch b {
			case bErrData:
				send(map[string]any{"error": map[string]any{"message": "KV transfer failed", "code": 500}})
				return
			case bErrEvent:
				fmt.Fprint(w, "event: error\ndata: {\"message\":\"engine crashed\"}\n\n")
				flush()
				return
			case bDrop:
				panic(http.ErrAbortHandler) // cuts the connection mid-stream
			}
		}
		if i == 0 && b == bHangStream {
			<-r.Context().Done()
			return
		}
	}
	finish := any("length")
	switch b {
	case bNoFinish:
		finish = nil
	case bAbort:
		finish = "abort"
	}
	send(choice("", finish))
	if !f.noUsage {
		words := len(strings.Fields(promptOf(body)))
		send(map[string]any{"choices": []any{}, "usage": map[string]any{
			"prompt_tokens": words, "completion_tokens": f.chunks, "total_tokens": words + f.chunks}})
	}
	if b != bNoDone {
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}
