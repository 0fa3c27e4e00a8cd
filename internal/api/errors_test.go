package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// A failure after some tokens were streamed must never look like success:
// the openai-go client must report an error, and the stream must carry no
// finish_reason and no [DONE].
func TestMidStreamFailure(t *testing.T) {
	fail := errkind.New(errkind.Integrity, "kv_transfer_failed", "the KV transfer for this request failed")
	h := newHarness(t, func(_ *Options, f *fakeBackend) { f.failAfter = 6; f.failErr = fail })
	st := h.client(keyA).Completions.NewStreaming(ctx, completionParams("x"))
	var text string
	for st.Next() {
		c := st.Current()
		if len(c.Choices) > 0 {
			text += c.Choices[0].Text
			if c.Choices[0].FinishReason != "" {
				t.Fatalf("finish_reason %q on a failed stream", c.Choices[0].FinishReason)
			}
		}
	}
	if st.Err() == nil || !strings.Contains(st.Err().Error(), "kv_transfer_failed") {
		t.Fatalf("client saw success (err %v) after text %q", st.Err(), text)
	}
	if text == "" {
		t.Fatal("the failure was meant to come after some text")
	}

	// The raw stream: an error event last, no finish_reason, no [DONE].
	resp := post(t, h, "/v1/completions", keyA, `{"model":"stories260K","prompt":"x","stream":true,"max_tokens":40}`)
	raw, _ := io.ReadAll(resp.Body)
	events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	last := events[len(events)-1]
	if !strings.HasPrefix(last, `data: {"error":`) || strings.Contains(string(raw), "[DONE]") || strings.Contains(string(raw), `"finish_reason":"`) {
		t.Fatalf("stream:\n%s", raw)
	}
	var body errorBody
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &body); err != nil || body.Error.Type != "integrity_error" {
		t.Fatalf("error event %q: %v", last, err)
	}
}

// Without streaming, the same failure is an error status, never a 200.
func TestFailureNonStreaming(t *testing.T) {
	for _, tc := range []struct {
		kind   errkind.Kind
		status int
	}{{errkind.Integrity, 500}, {errkind.Unavailable, 502}, {errkind.Overload, 503}, {errkind.Internal, 500}} {
		h := newHarness(t, func(_ *Options, f *fakeBackend) {
			f.failAfter = 3
			f.failErr = errkind.New(tc.kind, "boom", "it failed")
		})
		_, err := h.client(keyA).Completions.New(ctx, completionParams("x"))
		apiError(t, err, tc.status)
	}
}

// A stream that fails before any text gets a plain error status.
func TestStreamFailsBeforeFirstToken(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) {
		f.failAfter = 0
		f.submitErr = errkind.New(errkind.Overload, "queue_full", "the queue is full")
	})
	st := h.client(keyA).Completions.NewStreaming(ctx, completionParams("x"))
	for st.Next() {
		t.Fatal("chunk from a failed request")
	}
	apiError(t, st.Err(), 503)
}

// An engine that reports a prompt length other than the one submitted has
// processed something else (the placeholder-prompt bug): the output is
// withheld.
func TestPromptCountMismatchWithheld(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) { f.lieAboutPN = 1 })
	resp := post(t, h, "/v1/completions", keyA, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":10}`)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 500 || strings.Contains(string(raw), "Once") || !strings.Contains(string(raw), "prompt_mismatch") {
		t.Fatalf("status %d body %s", resp.StatusCode, raw)
	}
	st := h.client(keyA).Completions.NewStreaming(ctx, completionParams("x"))
	for st.Next() {
		if c := st.Current(); len(c.Choices) > 0 && c.Choices[0].FinishReason != "" {
			t.Fatal("finish_reason on a mismatched stream")
		}
	}
	if st.Err() == nil {
		t.Fatal("streaming client saw success")
	}
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, nil)
	big := `{"model":"stories260K","prompt":"` + strings.Repeat("a", 5000) + `"}`
	cases := []struct {
		name, path, body string
		status           int
		param, msg       string
	}{
		{"malformed", "/v1/completions", `{"model": "stories260K", "prompt": }`, 400, "", "not valid JSON"},
		{"truncated", "/v1/completions", `{"model": "stories260K"`, 400, "", "truncated"},
		{"empty", "/v1/completions", ``, 400, "", "empty"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "", "JSON object"},
		{"trailing", "/v1/completions", `{"model":"stories260K","prompt":"x"} {}`, 400, "", "after its JSON object"},
		{"wrong type", "/v1/completions", `{"model":"stories260K","prompt":"x","max_tokens":"ten"}`, 400, "max_tokens", "max_tokens must be an integer"},
		{"wrong type temperature", "/v1/completions", `{"model":"stories260K","prompt":"x","temperature":"hot"}`, 400, "temperature", "number"},
		{"unknown field", "/v1/completions", `{"model":"stories260K","prompt":"x","frobnicate":1}`, 400, "frobnicate", "unknown parameter"},
		{"unknown model", "/v1/completions", `{"model":"gpt-4","prompt":"x"}`, 400, "model", "gpt-4"},
		{"missing model", "/v1/completions", `{"prompt":"x"}`, 400, "model", "required"},
		{"missing prompt", "/v1/completions", `{"model":"stories260K"}`, 400, "prompt", "required"},
		{"prompt batch", "/v1/completions", `{"model":"stories260K","prompt":["a","b"]}`, 400, "prompt", "exactly one"},
		{"bad token id", "/v1/completions", `{"model":"stories260K","prompt":[1,99999]}`, 400, "prompt[1]", "99999"},
		{"n=2", "/v1/completions", `{"model":"stories260K","prompt":"x","n":2}`, 400, "n", "n must be 1"},
		{"echo", "/v1/completions", `{"model":"stories260K","prompt":"x","echo":true}`, 400, "echo", "not supported"},
		{"five stops", "/v1/completions", `{"model":"stories260K","prompt":"x","stop":["a","b","c","d","e"]}`, 400, "stop", "at most 4"},
		{"stop type", "/v1/completions", `{"model":"stories260K","prompt":"x","stop":7}`, 400, "stop", "string"},
		{"max_tokens overflowing the sum", "/v1/completions", `{"model":"stories260K","prompt":"x","max_tokens":9223372036854775807}`, 400, "messages", "context length is 64"},
		{"max_tokens 0", "/v1/completions", `{"model":"stories260K","prompt":"x","max_tokens":0}`, 400, "max_tokens", "at least 1"},
		{"temperature", "/v1/completions", `{"model":"stories260K","prompt":"x","temperature":3}`, 400, "temperature", "between 0 and 2"},
		{"top_p", "/v1/completions", `{"model":"stories260K","prompt":"x","top_p":0}`, 400, "top_p", "greater than 0"},
		{"stream_options without stream", "/v1/completions", `{"model":"stories260K","prompt":"x","stream_options":{"include_usage":true}}`, 400, "stream_options", "stream"},
		{"too large", "/v1/completions", big, 413, "", "4096 bytes"},
		{"no messages", "/v1/chat/completions", `{"model":"stories260K","messages":[]}`, 400, "messages", "empty"},
		{"bad role", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"tool","content":"x"}]}`, 400, "messages[0].role", "tool"},
		{"image part", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages[0].content[0].type", "image_url"},
		{"message wrong type", "/v1/chat/completions", `{"model":"stories260K","messages":"hi"}`, 400, "messages", "an array"},
		{"tools", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, 400, "tools", "not supported"},
		{"no route", "/v1/embeddings", `{}`, 404, "", "no route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, h, tc.path, keyA, tc.body)
			var body errorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("status %d, body %q is not an error object", resp.StatusCode, raw)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if param != tc.param || !strings.Contains(body.Error.Message, tc.msg) {
				t.Fatalf("param %q message %q; want param %q and %q", param, body.Error.Message, tc.param, tc.msg)
			}
		})
	}
	if n := len(h.fake.calls()); n != 0 {
		t.Fatalf("backend called %d times by bad requests", n)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t, nil)
	req, _ := http.NewRequest("GET", h.http.URL+"/v1/completions", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("status %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestOperationalEndpoints(t *testing.T) {
	ready := false
	h := newHarness(t, func(o *Options, _ *fakeBackend) { o.Ready = func() bool { return ready } })
	get := func(path string) (int, string) {
		resp, err := http.Get(h.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/health"); code != 200 {
		t.Fatalf("/health %d", code)
	}
	if code, _ := get("/ready"); code != 503 {
		t.Fatalf("/ready before ready: %d", code)
	}
	ready = true
	if code, _ := get("/ready"); code != 200 {
		t.Fatalf("/ready: %d", code)
	}
	if _, err := h.client(keyB).Completions.New(ctx, completionParams("x")); err != nil {
		t.Fatal(err)
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, `bulkhead_http_requests_total{code="200",tenant="b"} 1`) ||
		!strings.Contains(body, `bulkhead_time_to_first_token_seconds_count{tenant="b"} 1`) {
		t.Fatalf("/metrics %d:\n%s", code, body)
	}
	models, err := h.client(keyA).Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "stories260K" {
		t.Fatalf("models %+v %v", models, err)
	}
}

// A client that goes away mid-stream cancels the request's context, so the
// backend stops generating for it.
func TestClientDisconnectCancels(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) {
		f.reply = func([]int) string { return strings.Repeat(" and then", 40) }
		f.delay = 5 * time.Millisecond // 60 tokens take 300 ms: the disconnect comes first
	})
	cctx, cancel := contextWithCancel()
	p := completionParams("x")
	p.MaxTokens = openai.Int(60)
	p.Prompt = tokenPrompt(2)
	st := h.client(keyA).Completions.NewStreaming(cctx, p)
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	cancel()
	for st.Next() {
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.fake.mu.Lock()
		n := h.fake.cancelled
		h.fake.mu.Unlock()
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the backend's request was never cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that goes away before the backend has taken its request (the
// engine then refuses it) is a disconnect, counted as 499 in the metrics,
// not as a failure of the backend (502).
func TestClientGoneBeforeSubmit(t *testing.T) {
	hold := make(chan struct{})
	h := newHarness(t, func(_ *Options, f *fakeBackend) { f.submitHold = hold })
	cctx, cancel := contextWithCancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.client(keyA).Completions.New(cctx, completionParams("x"))
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.fake.mu.Lock()
		n := len(h.fake.submitted)
		h.fake.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the backend")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	select {
	case <-hold: // the backend has refused it
	case <-time.After(5 * time.Second):
		t.Fatal("the backend never saw the cancellation")
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(h.http.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if strings.Contains(body, `bulkhead_http_requests_total{code="502"`) {
			t.Fatalf("a client that left was counted as a backend failure:\n%s", body)
		}
		if strings.Contains(body, `bulkhead_http_requests_total{code="499",tenant="a"} 1`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 499 for the client that left:\n%s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The prompt-count check also guards a generation cut short by a stop
// sequence: the engine's Result still says what it processed, and a
// mismatch withholds the text rather than answering 200.
func TestPromptCountMismatchWithheldAtStop(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) { f.lieAboutPN = 1 })
	for _, stream := range []string{"false", "true"} {
		resp := post(t, h, "/v1/completions", keyA, `{"model":"stories260K","prompt":"Once upon a time","max_tokens":40,"stop":"little cat","stream":`+stream+`}`)
		raw, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(raw), `"finish_reason":"stop"`) || !strings.Contains(string(raw), "prompt_mismatch") {
			t.Fatalf("stream=%s: status %d body %s", stream, resp.StatusCode, raw)
		}
		if stream == "false" && (resp.StatusCode != 500 || strings.Contains(string(raw), "Once")) {
			t.Fatalf("status %d body %s", resp.StatusCode, raw)
		}
	}
}

// A client that leaves mid-generation is a disconnect even when the
// backend's Result reaches the handler before the context's end does: the
// engine ends a cancelled request with request_cancelled (Unavailable),
// and Stream.Next hands over a queued Result before it looks at ctx. That
// must not be answered and counted as the backend's failure (502).
func TestBackendCancelAfterClientLeftIsDisconnect(t *testing.T) {
	h := newHarness(t, nil)
	st := engine.NewStream()
	st.Push(300)
	st.Close(engine.Result{Err: errkind.New(errkind.Unavailable, "request_cancelled", "the request was cancelled"),
		Usage: engine.Usage{PromptTokens: 1, CompletionTokens: 1}})
	cctx, cancel := contextWithCancel()
	cancel()
	d := h.fake.tok.NewDecoder(1)
	g := &generation{s: h.srv, c: &call{tenant: "a"}, prompt: []int{1}, stream: st, cancel: cancel, dec: d, flush: d.Flush}
	_, _, out := g.collect(cctx)
	if out.err == nil || !isDisconnect(out.err) {
		t.Fatalf("outcome %+v: want a disconnect", out.err)
	}
}
