package api

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// A top_p too small for float32 still restricts sampling to the most
// likely token: rounded to 0 it would mean "keep all" to the sampler, the
// opposite of what the client asked.
func TestTinyTopPStaysPositive(t *testing.T) {
	var req completionRequest
	if err := decodeBody(strings.NewReader(`{"model":"stories260K","prompt":"x","top_p":1e-50}`), &req); err != nil {
		t.Fatal(err)
	}
	g, err := req.resolve(512)
	if err != nil {
		t.Fatal(err)
	}
	if g.sampling.TopP <= 0 {
		t.Fatalf("top_p 1e-50 became %v, which the sampler reads as off", g.sampling.TopP)
	}
}

// checkBody runs a body through everything readRequest and the handlers
// check before tokenizing: decoding, unsupported fields, the shared
// parameters, and the prompt or messages.
func checkBody(t *testing.T, chat bool, body string) *errkind.Error {
	t.Helper()
	var req generationRequest
	if chat {
		req = new(chatRequest)
	} else {
		req = new(completionRequest)
	}
	if err := decodeBody(strings.NewReader(body), req); err != nil {
		return err
	}
	if err := req.unsupported(); err != nil {
		return err
	}
	if _, err := req.resolve(512); err != nil {
		return err
	}
	if chat {
		_, err := parseMessages(req.(*chatRequest).Messages)
		return err
	}
	_, err := parsePrompt(req.(*completionRequest).Prompt, 512)
	return err
}

// wantParam checks that err is a 400 with the given code and param.
func wantParam(t *testing.T, body string, err *errkind.Error, code, param string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted; want %s for %q", body, code, param)
	}
	if status, _ := statusOf(err); status != 400 || err.Code != code || err.Param != param {
		t.Fatalf("%s: status %d code %q param %q (%s); want 400 %s for %q", body, status, err.Code, err.Param, err.Message, code, param)
	}
}

// Field names are exact: OpenAI refuses "MAX_TOKENS" as an unknown
// argument, where encoding/json alone would take it as max_tokens. Keys
// that are the client's own data (logit_bias, metadata, a JSON schema)
// keep whatever case they have.
func TestFieldNamesExactCase(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		chat        bool
		body, param string
	}{
		{false, `{"model":"stories260K","prompt":"x","MAX_TOKENS":5}`, "MAX_TOKENS"},
		{false, `{"Model":"stories260K","prompt":"x"}`, "Model"},
		{false, `{"model":"stories260K","Prompt":"x"}`, "Prompt"},
		{false, `{"model":"stories260K","prompt":"x","stream":true,"stream_options":{"Include_Usage":true}}`, "stream_options.Include_Usage"},
		{true, `{"model":"stories260K","messages":[{"ROLE":"user","content":"x"}]}`, "messages[0].ROLE"},
		{true, `{"model":"stories260K","messages":[{"role":"user","content":[{"Type":"text","text":"x"}]}]}`, "messages[0].content[0].Type"},
		{true, `{"model":"stories260K",` + msgs + `,"response_format":{"TYPE":"text"}}`, "response_format.TYPE"},
		{true, `{"model":"stories260K",` + msgs + `,"Top_Logprobs":2}`, "Top_Logprobs"},
		// An escape that spells a different case is still a different name.
		{false, `{"model":"stories260K","prompt":"x","\u004dax_tokens":5}`, "Max_tokens"},
	} {
		err := checkBody(t, tc.chat, tc.body)
		wantParam(t, tc.body, err, "unknown_parameter", tc.param)
		if !strings.Contains(err.Message, "unknown parameter") {
			t.Fatalf("%s: message %q", tc.body, err.Message)
		}
	}

	// Exact names still work, escaped or not, and user keys keep their case.
	var req chatRequest
	body := `{"model":"stories260K","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max\u005ftokens":5,` +
		`"metadata":{"Key":"V","KEY":"w"},"response_format":{"type":"text"},"stream":true,"stream_options":{"include_usage":true}}`
	if err := decodeBody(strings.NewReader(body), &req); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if req.MaxTokens == nil || *req.MaxTokens != 5 || req.Metadata["Key"] != "V" || req.Metadata["KEY"] != "w" || len(req.Metadata) != 2 {
		t.Fatalf("decoded %+v", req)
	}
	body = `{"model":"stories260K","prompt":"x","logit_bias":{"AbC":1}}`
	wantParam(t, body, checkBody(t, false, body), "invalid_value", "logit_bias")
}

// An unknown field deep in the body is named by its full path, as OpenAI
// writes it, not by its last name alone.
func TestUnknownNestedFieldPath(t *testing.T) {
	const user = `{"role":"user","content":"x"}`
	for _, tc := range []struct {
		chat        bool
		body, param string
	}{
		{false, `{"model":"stories260K","prompt":"x","frobnicate":1}`, "frobnicate"},
		{false, `{"model":"stories260K","prompt":"x","stream":true,"stream_options":{"include_usage":true,"foo":1}}`, "stream_options.foo"},
		{true, `{"model":"stories260K","messages":[{"role":"user","content":"x","foo":1}]}`, "messages[0].foo"},
		{true, `{"model":"stories260K","messages":[` + user + `,` + user + `,{"role":"user","content":"x","tool_calls":[]}]}`, "messages[2].tool_calls"},
		{true, `{"model":"stories260K","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","foo":{"bar":1}}]}]}`, "messages[0].content[1].foo"},
		{true, `{"model":"stories260K","messages":[` + user + `],"response_format":{"type":"text","foo":1}}`, "response_format.foo"},
		{true, `{"model":"stories260K","messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{},"foo":1}}}`, "response_format.json_schema.foo"},
		// A key with characters that need quoting is named as it was sent.
		{true, `{"model":"stories260K","messages":[{"role":"user","content":"x","a\"b\u00e9":1}]}`, "messages[0].a\"bé"},
	} {
		wantParam(t, tc.body, checkBody(t, tc.chat, tc.body), "unknown_parameter", tc.param)
	}

	// What the client owns is not checked: a JSON schema's own keys, tools
	// (refused as a whole), and the keys of logit_bias.
	for _, tc := range []struct {
		body, code, param string
	}{
		{`{"model":"stories260K","messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"Type":"object","FOO":{"bar":[1]}}}}}`, "unsupported_value", "response_format"},
		{`{"model":"stories260K","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","Foo":1}}]}`, "unsupported_value", "tools"},
		{`{"model":"stories260K","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, "unsupported_value", "messages[0].content[0].type"},
	} {
		wantParam(t, tc.body, checkBody(t, true, tc.body), tc.code, tc.param)
	}
}

// Over HTTP, a wrongly-cased or nested unknown field is the same 400 as a
// plain unknown field: invalid_request_error, unknown_parameter, and the
// path in param. Nothing reaches the backend.
func TestUnknownFieldErrorShape(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/completions", `{"model":"stories260K","prompt":"x","MAX_TOKENS":5}`, "MAX_TOKENS"},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"x","foo":1}]}`, "messages[0].foo"},
	} {
		resp := post(t, h, tc.path, keyA, tc.body)
		raw, _ := io.ReadAll(resp.Body)
		var body errorBody
		if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != 400 {
			t.Fatalf("status %d body %s", resp.StatusCode, raw)
		}
		e := body.Error
		if e.Type != "invalid_request_error" || e.Code == nil || *e.Code != "unknown_parameter" || e.Param == nil || *e.Param != tc.param {
			t.Fatalf("%s: %s", tc.body, raw)
		}
	}
	if n := len(h.fake.calls()); n != 0 {
		t.Fatalf("backend called %d times", n)
	}
}

// The penalties and logit_bias reach the sampler as the client sent them,
// within OpenAI's ranges; logit_bias keys must be token ids of the model.
func TestPenaltiesAndLogitBias(t *testing.T) {
	var req completionRequest
	body := `{"model":"stories260K","prompt":"x","presence_penalty":-0.5,"frequency_penalty":2,"logit_bias":{"300":-100,"7":2.5,"0":100}}`
	if err := decodeBody(strings.NewReader(body), &req); err != nil {
		t.Fatal(err)
	}
	g, err := req.resolve(512)
	if err != nil {
		t.Fatal(err)
	}
	want := []sample.Bias{{Token: 0, Bias: 100}, {Token: 7, Bias: 2.5}, {Token: 300, Bias: -100}}
	if s := g.sampling; s.PresencePenalty != -0.5 || s.FrequencyPenalty != 2 || !slices.Equal(s.LogitBias, want) {
		t.Fatalf("sampling %+v", s)
	}
	for _, tc := range []struct{ extra, param string }{
		{`"presence_penalty":2.5`, "presence_penalty"},
		{`"frequency_penalty":-2.01`, "frequency_penalty"},
		{`"logit_bias":{"512":1}`, "logit_bias"},
		{`"logit_bias":{"-1":1}`, "logit_bias"},
		{`"logit_bias":{"07":1}`, "logit_bias"},
		{`"logit_bias":{" 7":1}`, "logit_bias"},
		{`"logit_bias":{"hello":1}`, "logit_bias"},
		{`"logit_bias":{"7":100.5}`, "logit_bias"},
	} {
		body := `{"model":"stories260K","prompt":"x",` + tc.extra + `}`
		wantParam(t, body, checkBody(t, false, body), "invalid_value", tc.param)
	}
}
