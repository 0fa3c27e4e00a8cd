package audit

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The ways real servers differ from OpenAI's that the audit must read
// right: numeric error codes, compressed bodies, a rate limit on the model
// list, and contexts longer than the default over-limit prompt.

// TestNumericErrorCodeUnderstood: vLLM and llama.cpp put the HTTP status
// in "code" and say what went wrong in "type" and "message"; their
// refusal of an over-long prompt is the expected refusal, not a WARN,
// while a 400 for another reason is still one.
func TestNumericErrorCodeUnderstood(t *testing.T) {
	p, _ := NewPlan(testConfig())
	var q *Request
	for i := range p.Requests {
		if p.Requests[i].Kind == OverLimit {
			q = &p.Requests[i]
			break
		}
	}
	for _, c := range []struct {
		name, body string
		want       Status
	}{
		{"vLLM, bare", `{"object":"error","message":"This model's maximum context length is 256 tokens. However, you requested 385 tokens (257 in the messages, 128 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, Pass},
		{"vLLM, wrapped", `{"error":{"message":"This model's maximum context length is 256 tokens. However, your request has 257 input tokens.","type":"BadRequestError","param":null,"code":400}}`, Pass},
		{"SGLang", `{"object":"error","message":"The input (257 tokens) is longer than the model's context length (256 tokens).","type":"BadRequestError","code":400}`, Pass},
		{"llama.cpp", `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":257,"n_ctx":256}}`, Pass},
		{"another reason", `{"object":"error","message":"temperature must be positive","type":"BadRequestError","code":400}`, Warn},
		{"a named code wins", `{"error":{"message":"maximum context length is 256 tokens","code":"invalid_value"}}`, Warn},
	} {
		r := Parse(q, Response{Status: 400, Body: []byte(c.body)})
		if r.ErrorCode == "" || r.ErrorMessage == "" {
			t.Errorf("%s: code %q, message %q", c.name, r.ErrorCode, r.ErrorMessage)
		}
		if got, why := ClassifyOverLimit(&r); got != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got, why, c.want)
		}
		if strings.Contains(r.describe(), "400 400") {
			t.Errorf("%s: the status repeated as a code: %s", c.name, r.describe())
		}
	}
}

// serveEncoded answers every request with body, encoded by enc ("gzip" or
// "x-gzip", "deflate", "gzip-unlabelled" for gzip without the header,
// "gzip-mislabelled" for the header on a body sent as is, or any other
// coding name, sent as is).
func serveEncoded(t *testing.T, enc string, body []byte) *HTTPClient {
	t.Helper()
	var buf bytes.Buffer
	switch enc {
	case "gzip", "x-gzip", "gzip-unlabelled":
		zw := gzip.NewWriter(&buf)
		zw.Write(body)
		zw.Close()
	case "deflate":
		zw := zlib.NewWriter(&buf)
		zw.Write(body)
		zw.Close()
	default:
		buf.Write(body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch enc {
		case "gzip-unlabelled":
		case "gzip-mislabelled":
			w.Header().Set("Content-Encoding", "gzip")
		default:
			w.Header().Set("Content-Encoding", enc)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(buf.Bytes())
	}))
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	c := NewHTTPClient(base, map[string]string{"acme": "sk-acme-secret-1", "globex": "sk-globex-secret-2"}, 1)
	t.Cleanup(c.Close)
	return c
}

// TestCompressedBodySearched: a server (or a proxy) that compresses its
// answer although the audit asked for none still has its body searched:
// acme's marker inside globex's gzip or deflate body is a leak, and acme's
// key inside it is redacted and reported; so is a body labelled gzip that
// is not. A coding the audit cannot decode is a WARN (not searched), never
// a silent pass; and a small compressed body cannot expand past the
// audit's read limit.
func TestCompressedBodySearched(t *testing.T) {
	p, m, q := planted(t, false)
	leaky := []byte(`{"choices":[{"text":"I heard ` + m.Word() + ` and sk-acme-secret-1","finish_reason":"stop"}]}`)
	for _, enc := range []string{"gzip", "deflate", "gzip-unlabelled", "x-gzip", "gzip-mislabelled"} {
		c := serveEncoded(t, enc, leaky)
		resp := c.Send(context.Background(), q.Tenant, q.Endpoint, q.Body("m"))
		if bytes.Contains(resp.Body, []byte("sk-acme-secret-1")) {
			t.Fatalf("%s: a key in the decoded body was not redacted", enc)
		}
		res := noAnswers(p)
		res[q.ID] = Parse(q, resp)
		ch := checkOf(t, Evaluate(p, res), CheckCanaries)
		ev := evidence(ch)
		if ch.Status != Fail || !strings.Contains(ev, "acme's prompt reached globex's response") || !strings.Contains(ev, "acme's API key reached globex's response") {
			t.Errorf("%s: canaries %s\n%s", enc, ch.Status, ev)
		}
	}

	c := serveEncoded(t, "br", []byte("\x8b\x02\x80not really brotli"))
	resp := c.Send(context.Background(), q.Tenant, q.Endpoint, q.Body("m"))
	res := noAnswers(p)
	res[q.ID] = Parse(q, resp)
	ch := checkOf(t, Evaluate(p, res), CheckCanaries)
	if ev := evidence(ch); ch.Status != Warn || !strings.Contains(ev, "content coding br, which the audit cannot decode") {
		t.Errorf("br: canaries %s\n%s", ch.Status, ev)
	}

	bomb := bytes.Repeat([]byte(" "), maxBody+4096)
	resp = serveEncoded(t, "gzip", bomb).Send(context.Background(), q.Tenant, q.Endpoint, q.Body("m"))
	if !resp.Truncated || len(resp.Body) != maxBody {
		t.Errorf("expanding body: truncated %v, %d bytes", resp.Truncated, len(resp.Body))
	}
}

// TestModelsRetriesBusy: GET /v1/models answered 429 or 503 is asked
// again, as every other request is, instead of stopping the audit before
// it starts; one that stays busy is an error naming the status.
func TestModelsRetriesBusy(t *testing.T) {
	for _, busyFor := range []int{2, maxTries} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch k := n.Add(1); {
			case int(k) <= busyFor && k%2 == 1:
				w.WriteHeader(http.StatusTooManyRequests)
				w.Write([]byte(`{"error":{"message":"slow down","code":"rate_limit_exceeded"}}`))
			case int(k) <= busyFor:
				w.WriteHeader(http.StatusServiceUnavailable)
			default:
				w.Write([]byte(`{"object":"list","data":[{"id":"tiny"}]}`))
			}
		}))
		base, _ := url.Parse(srv.URL)
		c := NewHTTPClient(base, map[string]string{"acme": "sk-acme-secret-1"}, 1)
		c.RetryWait = time.Millisecond
		ids, err := c.Models(context.Background(), "acme")
		switch {
		case busyFor < maxTries && (err != nil || len(ids) != 1 || ids[0] != "tiny" || n.Load() != int32(busyFor+1)):
			t.Errorf("busy %d times: %v %v after %d requests", busyFor, ids, err, n.Load())
		case busyFor == maxTries && (err == nil || !strings.Contains(err.Error(), "503") || n.Load() != maxTries):
			t.Errorf("always busy: %v %v after %d requests", ids, err, n.Load())
		}
		c.Close()
		srv.Close()
	}
}

// TestModelsContextLen: the context length a model list reports, under
// the names vLLM, llama.cpp and others give it.
func TestModelsContextLen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"object":"list","data":[
			{"id":"vllm","object":"model","max_model_len":262144},
			{"id":"llamacpp","object":"model","meta":{"n_vocab":128256,"n_ctx_train":131072}},
			{"id":"router","context_length":200000},
			{"id":"plain","object":"model","owned_by":"bulkhead"},
			{"id":"odd","max_model_len":"big"}]}`))
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	c := NewHTTPClient(base, map[string]string{"acme": "sk-acme-secret-1"}, 1)
	defer c.Close()
	ms, err := c.ListModels(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ms); got != "[{vllm 262144} {llamacpp 131072} {router 200000} {plain 0} {odd 0}]" {
		t.Errorf("models %s", got)
	}
}

// TestLongContextNotFailed: without a known context length, an endpoint
// whose context is longer than the default over-limit prompt answers it
// correctly, after reading all of it; that is a WARN saying to pass the
// real length, not the placeholder bug. An answer that did not read the
// prompt (usage shows a handful of tokens), or says nothing of it, still
// fails.
func TestLongContextNotFailed(t *testing.T) {
	if DefaultOverLength <= 1<<17 {
		t.Errorf("default over-limit prompts of %d tokens fit a 131,072-token context", DefaultOverLength)
	}
	cfg := testConfig()
	cfg.ContextLen = 0
	p, _ := NewPlan(cfg)
	for _, c := range []struct {
		r    Result
		want Status
	}{
		{Result{Status: 200, Complete: true, Text: "Once", Finish: "length", UsageReported: true, PromptTokens: p.OverLength}, Warn},
		{Result{Status: 200, Complete: true, Text: "Once", Finish: "length", UsageReported: true, PromptTokens: 1}, Fail},
		{Result{Status: 200, Complete: true, Text: "Once", Finish: "length"}, Fail},
		{Result{Status: 200, Text: "Once", ErrorMessage: "withheld", UsageReported: true, PromptTokens: p.OverLength}, Fail},
	} {
		res := noAnswers(p)
		for i := range p.Requests {
			if p.Requests[i].Kind == OverLimit {
				res[i] = c.r
				res[i].ID = i
			}
		}
		ch := checkOf(t, Evaluate(p, res), CheckOverLimit)
		if ch.Status != c.want {
			t.Errorf("%+v: over-limit %s, want %s", c.r, ch.Status, c.want)
		}
		if ev := evidence(ch); c.want == Warn && (!strings.Contains(ev, "pass --context-len") || !strings.Contains(ch.Summary, "context is longer than")) {
			t.Errorf("%s\n%s", ch.Summary, ev)
		}
	}
	// End to end, with a length the endpoint reported that is shorter
	// than its context: the honest endpoint answers, and is not failed.
	cfg.ContextLen, cfg.ContextLenSource = 256, "GET /v1/models"
	rep, err := (&fake{ctxLen: 1 << 12}).audit(cfg, Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkOf(t, rep, CheckOverLimit); c.Status != Warn {
		t.Errorf("over-limit %s: %s\n%s", c.Status, c.Summary, evidence(c))
	}
	// A length the endpoint reported is a guess too; one the operator
	// gave is not.
	for _, source := range []string{"GET /v1/models", ""} {
		cfg.ContextLen, cfg.ContextLenSource = 4096, source
		p, _ := NewPlan(cfg)
		res := noAnswers(p)
		for i := range p.Requests {
			if p.Requests[i].Kind == OverLimit {
				res[i] = Result{ID: i, Status: 200, Complete: true, Text: "Once", Finish: "length", UsageReported: true, PromptTokens: p.OverLength}
			}
		}
		want := Fail
		if source != "" {
			want = Warn
		}
		rep := Evaluate(p, res)
		if c := checkOf(t, rep, CheckOverLimit); c.Status != want {
			t.Errorf("context length from %q: over-limit %s, want %s", source, c.Status, want)
		}
		var b strings.Builder
		WriteText(&b, &rep)
		if got := strings.Contains(b.String(), "(context length 4096 from GET /v1/models)"); got != (source != "") {
			t.Errorf("context length from %q: header\n%s", source, b.String())
		}
	}
}
