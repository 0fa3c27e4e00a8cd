package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

var ctx = context.Background()

func completionParams(prompt string) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:       embedded.Name,
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:   openai.Int(40),
		Temperature: openai.Float(0),
	}
}

func tokenPrompt(n int) openai.CompletionNewParamsPromptUnion {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(300 + i%200)
	}
	return openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}
}

// apiError asserts err is an API error with the given status and returns it.
func apiError(t *testing.T, err error, status int) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error (want status %d)", err, status)
	}
	if ae.StatusCode != status {
		t.Fatalf("status %d (%s), want %d", ae.StatusCode, ae.Message, status)
	}
	return ae
}

func TestCompletion(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client(keyA)
	resp, err := c.Completions.New(ctx, completionParams("Once upon"))
	if err != nil {
		t.Fatal(err)
	}
	want := h.fake.tok.Decode(h.fake.tok.Encode(defaultReply, false))
	if resp.Choices[0].Text != want || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("text %q finish %q, want %q stop", resp.Choices[0].Text, resp.Choices[0].FinishReason, want)
	}
	sub := h.fake.calls()
	if len(sub) != 1 {
		t.Fatalf("%d submissions", len(sub))
	}
	wantPrompt := h.fake.tok.Encode("Once upon", true)
	if !equalInts(sub[0].Prompt, wantPrompt) {
		t.Fatalf("submitted prompt %v, want %v", sub[0].Prompt, wantPrompt)
	}
	if resp.Usage.PromptTokens != int64(len(wantPrompt)) || resp.Usage.CompletionTokens != int64(len(h.fake.tok.Encode(defaultReply, false))) {
		t.Fatalf("usage %+v", resp.Usage)
	}
	if sub[0].Tenant != "a" || sub[0].MaxTokens != 40 || sub[0].Sampling.Temperature != 0 {
		t.Fatalf("submitted %+v", sub[0])
	}
}

func TestMaxTokensLength(t *testing.T) {
	h := newHarness(t, nil)
	p := completionParams("x")
	p.MaxTokens = openai.Int(3)
	resp, err := h.client(keyA).Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 3 {
		t.Fatalf("finish %q usage %+v", resp.Choices[0].FinishReason, resp.Usage)
	}
}

func TestChatAppliesTemplate(t *testing.T) {
	h := newHarness(t, func(o *Options, _ *fakeBackend) {
		o.ChatTemplate = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
	})
	resp, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:               embedded.Name,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be kind."), openai.UserMessage("Tell a story.")},
		MaxCompletionTokens: openai.Int(20),
	})
	if err != nil {
		t.Fatalf("%v: %s", err, err.(*openai.Error).RawJSON())
	}
	want := h.fake.tok.EncodeSpecial("[system]Be kind.[user]Tell a story.[assistant]", true)
	if got := h.fake.calls()[0].Prompt; !equalInts(got, want) {
		t.Fatalf("prompt tokens %v, want %v", got, want)
	}
	if resp.Usage.PromptTokens != int64(len(want)) || resp.Choices[0].Message.Role != "assistant" || resp.Choices[0].Message.Content == "" {
		t.Fatalf("response %+v", resp)
	}
	if h.fake.calls()[0].MaxTokens != 20 {
		t.Fatalf("max_completion_tokens not honoured: %d", h.fake.calls()[0].MaxTokens)
	}
}

func TestChatBuiltinTemplate(t *testing.T) {
	h := newHarness(t, nil)
	_, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: embedded.Name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The built-in template makes a single user message its own text, so
	// chat and completion prompts agree.
	if got, want := h.fake.calls()[0].Prompt, h.fake.tok.Encode("Once upon a time", true); !equalInts(got, want) {
		t.Fatalf("prompt %v, want %v", got, want)
	}
}

func TestChatTemplateRaise(t *testing.T) {
	h := newHarness(t, func(o *Options, _ *fakeBackend) {
		o.ChatTemplate = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}{{ messages[0].content }}"
	})
	_, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: embedded.Name, Messages: []openai.ChatCompletionMessageParamUnion{openai.AssistantMessage("hi")},
	})
	ae := apiError(t, err, 400)
	if !strings.Contains(ae.Message, "first message must be from the user") {
		t.Fatalf("message %q", ae.Message)
	}
	if len(h.fake.calls()) != 0 {
		t.Fatal("backend called for a rejected conversation")
	}
}

func TestStreamingCompletion(t *testing.T) {
	h := newHarness(t, nil)
	p := completionParams("Once")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := h.client(keyA).Completions.NewStreaming(ctx, p)
	var text strings.Builder
	var finish string
	var usageSeen bool
	chunks := 0
	for st.Next() {
		ch := st.Current()
		chunks++
		if len(ch.Choices) == 0 {
			usageSeen = ch.Usage.PromptTokens == int64(len(h.fake.calls()[0].Prompt)) && ch.Usage.CompletionTokens > 0
			continue
		}
		text.WriteString(ch.Choices[0].Text)
		if ch.Choices[0].FinishReason != "" {
			finish = string(ch.Choices[0].FinishReason)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := h.fake.tok.Decode(h.fake.tok.Encode(defaultReply, false))
	if text.String() != want || finish != "stop" || !usageSeen || chunks < 5 {
		t.Fatalf("text %q finish %q usage %v chunks %d", text.String(), finish, usageSeen, chunks)
	}
}

func TestStreamingChatRaw(t *testing.T) {
	h := newHarness(t, nil)
	body := `{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":5}`
	resp := post(t, h, "/v1/chat/completions", keyA, body)
	raw, _ := io.ReadAll(resp.Body)
	s := string(raw)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"role":"assistant"`) || !strings.Contains(s, `"finish_reason":"length"`) {
		t.Fatalf("stream:\n%s", s)
	}
	for _, ev := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		if !strings.HasPrefix(ev, "data: ") {
			t.Fatalf("event %q is not a data line", ev)
		}
	}
}

func TestStopSequences(t *testing.T) {
	tok := testTokenizer(t)
	// "little cat" spans several tokens of the 512-piece vocabulary.
	if n := len(tok.Encode("little cat", false)); n < 3 {
		t.Fatalf("stop sequence is %d tokens; the test wants one split across tokens", n)
	}
	full := tok.Decode(tok.Encode(defaultReply, false))
	want := full[:strings.Index(full, "little cat")]
	for _, stream := range []bool{false, true} {
		h := newHarness(t, nil)
		p := completionParams("x")
		p.Stop = openai.CompletionNewParamsStopUnion{OfStringArray: []string{"zebra", "little cat"}}
		var text, finish string
		if stream {
			st := h.client(keyA).Completions.NewStreaming(ctx, p)
			for st.Next() {
				ch := st.Current()
				text += ch.Choices[0].Text
				if ch.Choices[0].FinishReason != "" {
					finish = string(ch.Choices[0].FinishReason)
				}
				if strings.Contains(text, "little") {
					t.Fatalf("stream showed the start of the stop sequence: %q", text)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			resp, err := h.client(keyA).Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			text, finish = resp.Choices[0].Text, string(resp.Choices[0].FinishReason)
		}
		if text != want || finish != "stop" {
			t.Fatalf("stream=%v: text %q finish %q, want %q stop", stream, text, finish, want)
		}
	}
}

// A held-back prefix of a stop sequence that never completes is released.
func TestStopPrefixReleased(t *testing.T) {
	h := newHarness(t, nil)
	p := completionParams("x")
	p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String("happy!")}
	st := h.client(keyA).Completions.NewStreaming(ctx, p)
	var text string
	for st.Next() {
		if c := st.Current(); len(c.Choices) > 0 {
			text += c.Choices[0].Text
		}
	}
	if err := st.Err(); err != nil || !strings.HasSuffix(text, "happy.") {
		t.Fatalf("text %q err %v", text, err)
	}
}

func TestStopCancelsBackend(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) {
		f.reply = func([]int) string { return strings.Repeat(" The dog ran.", 30) }
	})
	p := completionParams("x")
	p.MaxTokens = openai.Int(60)
	p.Prompt = tokenPrompt(2)
	p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String("dog")}
	resp, err := h.client(keyA).Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "  The " { // the fake's reply decodes with the encoder's space prefix
		t.Fatalf("text %q", resp.Choices[0].Text)
	}
	if resp.Usage.CompletionTokens >= 20 {
		t.Fatalf("generation was not cut short: %d tokens", resp.Usage.CompletionTokens)
	}
}

func TestAuth(t *testing.T) {
	h := newHarness(t, nil)
	for _, key := range []string{"", "sk-wrong-key", keyA + "x", keyA[:len(keyA)-1]} {
		_, err := h.client(key).Completions.New(ctx, completionParams("x"))
		ae := apiError(t, err, 401)
		if ae.Type != "authentication_error" {
			t.Fatalf("type %q", ae.Type)
		}
	}
	if len(h.fake.calls()) != 0 {
		t.Fatal("backend called without a valid key")
	}
	// Each key maps to its own tenant.
	for key, tenant := range map[string]string{keyA: "a", keyB: "b"} {
		if _, err := h.client(key).Completions.New(ctx, completionParams("x")); err != nil {
			t.Fatal(err)
		}
		calls := h.fake.calls()
		if got := calls[len(calls)-1].Tenant; got != tenant {
			t.Fatalf("key of %s ran as tenant %q", tenant, got)
		}
	}
	if got := testutil.ToFloat64(h.metrics.Requests.WithLabelValues("-", "401")); got != 4 {
		t.Fatalf("401s counted %v", got)
	}
	// /v1/models needs a key too.
	_, err := h.client("").Models.List(ctx)
	apiError(t, err, 401)
	_, err = h.client("").Models.Get(ctx, "m")
	apiError(t, err, 401)
}

// TestModelsGet: GET /v1/models/{id} answers the served model and 404s
// any other, as openai-go's Models.Get expects.
func TestModelsGet(t *testing.T) {
	h := newHarness(t, nil)
	list, err := h.client(keyA).Models.List(ctx)
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	m, err := h.client(keyA).Models.Get(ctx, list.Data[0].ID)
	if err != nil || m.ID != list.Data[0].ID || m.OwnedBy != "bulkhead" {
		t.Fatalf("get %q: %+v %v", list.Data[0].ID, m, err)
	}
	// The context, as vLLM names it (ContextLen 64 in newHarness).
	for _, raw := range []string{list.Data[0].RawJSON(), m.RawJSON()} {
		var o struct {
			MaxModelLen int `json:"max_model_len"`
		}
		if err := json.Unmarshal([]byte(raw), &o); err != nil || o.MaxModelLen != 64 {
			t.Fatalf("model object %s: max_model_len %d (%v), want 64", raw, o.MaxModelLen, err)
		}
	}
	_, err = h.client(keyA).Models.Get(ctx, "gpt-4o")
	if e := apiError(t, err, 404); e.Code != "model_not_found" || !strings.Contains(e.Message, `"gpt-4o"`) {
		t.Fatalf("unknown model: %+v", e)
	}
	// A long id is echoed cut to 64 bytes, as in a request body.
	long := strings.Repeat("m", 5000)
	_, err = h.client(keyA).Models.Get(ctx, long)
	if e := apiError(t, err, 404); !strings.Contains(e.Message, `"`+long[:64]+`..."`) || len(e.Message) > 200 {
		t.Fatalf("a 5000-byte id: %d-byte message %.120q", len(e.Message), e.Message)
	}
}

func TestNoAuthMode(t *testing.T) {
	h := newHarness(t, func(o *Options, _ *fakeBackend) { o.Tenants = nil })
	if _, err := h.client("").Completions.New(ctx, completionParams("x")); err != nil {
		t.Fatal(err)
	}
	if got := h.fake.calls()[0].Tenant; got != config.LocalTenant {
		t.Fatalf("tenant %q", got)
	}
	if _, err := New(Options{Backend: h.fake, Tokenizer: h.fake.tok, ModelName: "m", Auth: config.AuthAPIKey}); err == nil {
		t.Fatal("api_key auth without tenants accepted")
	}
}

func TestLimits(t *testing.T) {
	// Limits: MaxInputTokens 48, ContextLen 64 (see newHarness).
	cases := []struct {
		name      string
		prompt    int
		maxTokens int64
		ok        bool
	}{
		{"input at limit", 48, 16, true},
		{"input at limit+1", 49, 1, false},
		{"context at limit", 40, 24, true},
		{"context at limit+1", 40, 25, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			p := completionParams("")
			p.Prompt = tokenPrompt(tc.prompt)
			p.MaxTokens = openai.Int(tc.maxTokens)
			resp, err := h.client(keyA).Completions.New(ctx, p)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if resp.Usage.PromptTokens != int64(tc.prompt) {
					t.Fatalf("prompt_tokens %d", resp.Usage.PromptTokens)
				}
				return
			}
			ae := apiError(t, err, 400)
			if ae.Code != "context_length_exceeded" || !strings.Contains(ae.Message, "tokens") {
				t.Fatalf("code %q message %q", ae.Code, ae.Message)
			}
			if n := len(h.fake.calls()); n != 0 {
				t.Fatalf("backend called %d times for a rejected request", n)
			}
		})
	}
}

func TestQuotaIs429(t *testing.T) {
	h := newHarness(t, func(_ *Options, f *fakeBackend) {
		f.submitErr = errkind.New(errkind.Quota, "tenant_quota_exceeded", "tenant has 4 requests running, its limit")
	})
	_, err := h.client(keyA).Completions.New(ctx, completionParams("x"))
	ae := apiError(t, err, 429)
	if ae.Type != "rate_limit_exceeded" || ae.Code != "tenant_quota_exceeded" {
		t.Fatalf("%+v", ae)
	}
}

func post(t *testing.T, h *harness, path, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", h.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ = option.WithAPIKey

func contextWithCancel() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }
