package audit

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	plain := &Request{ID: 3}
	stream := &Request{ID: 4, Stream: true}
	cases := []struct {
		name string
		req  *Request
		resp Response
		want Result
	}{
		{"completion", plain, Response{Status: 200, Body: []byte(`{"choices":[{"text":"Hi there","finish_reason":"length"}],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}`)},
			Result{ID: 3, Status: 200, Text: "Hi there", Finish: "length", Complete: true, CachedTokens: 2, CachedReported: true, PromptTokens: 3, UsageReported: true, Choices: 1}},
		{"chat", plain, Response{Status: 200, Body: []byte(`{"choices":[{"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}]}`)},
			Result{ID: 3, Status: 200, Text: "Hello", Finish: "stop", Complete: true, Choices: 1}},
		{"completion stream", stream, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\",\"finish_reason\":null}]}\n\n: comment\n\ndata: {\"choices\":[{\"text\":\" you\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n")},
			Result{ID: 4, Status: 200, Text: "Hi you", Finish: "length", Complete: true, CachedReported: true, Choices: 1}},
		{"chat stream", stream, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"Yo\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\ndata: [DONE]\r\n\r\n")},
			Result{ID: 4, Status: 200, Text: "Yo", Finish: "stop", Complete: true, Choices: 1}},
		{"stream without DONE", stream, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\",\"finish_reason\":\"length\"}]}\n\n")},
			Result{ID: 4, Status: 200, Text: "Hi", Finish: "length", Problem: "the stream ended without data: [DONE] after 1 events", Choices: 1}},
		{"error inside a stream", stream, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\"}]}\n\ndata: {\"error\":{\"message\":\"prompt_mismatch: withheld\",\"code\":\"prompt_mismatch\"}}\n\n")},
			Result{ID: 4, Status: 200, Text: "Hi", ErrorCode: "prompt_mismatch", ErrorMessage: "prompt_mismatch: withheld", Choices: 1}},
		{"error after [DONE]", stream, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\nevent: error\ndata: {\"message\":\"late\"}\n\n")},
			Result{ID: 4, Status: 200, Text: "Hi", Finish: "length", Problem: "the stream went on after data: [DONE]", Choices: 1}},
		{"error event", stream, Response{Status: 200, Body: []byte("event: error\ndata: {\"message\":\"boom\"}\n\n")},
			Result{ID: 4, Status: 200, ErrorMessage: "boom"}},
		{"400", plain, Response{Status: 400, Body: []byte(`{"error":{"message":"prompt has 257 tokens","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`)},
			Result{ID: 3, Status: 400, ErrorCode: "context_length_exceeded", ErrorType: "invalid_request_error", ErrorMessage: "prompt has 257 tokens"}},
		{"400 null code", stream, Response{Status: 400, Body: []byte(`{"object":"error","error":{"message":"too long","code":null}}`)},
			Result{ID: 4, Status: 400, ErrorMessage: "too long"}},
		{"413 numeric code", plain, Response{Status: 413, Body: []byte(`{"error":{"message":"too large","code":413}}`)},
			Result{ID: 3, Status: 413, ErrorCode: "413", ErrorMessage: "too large"}},
		{"502 html", plain, Response{Status: 502, Body: []byte("<html>bad gateway</html>")},
			Result{ID: 3, Status: 502, Unparsed: "<html>bad gateway</html>"}},
		{"200 not JSON", plain, Response{Status: 200, Body: []byte("hello")},
			Result{ID: 3, Status: 200, Unparsed: "hello", Problem: "the body is not JSON: invalid character 'h' looking for beginning of value"}},
		{"no response", plain, Response{Err: "connection refused"}, Result{ID: 3, Transport: "connection refused"}},
		{"200 truncated", plain, Response{Status: 200, Truncated: true, Body: []byte(`{"choices":[{"text":"x","finish_reason":"length"}]}`)},
			Result{ID: 3, Status: 200, Text: "x", Finish: "length", Problem: "the body was longer than the audit reads", Truncated: true, Choices: 1}},
	}
	for _, c := range cases {
		got := Parse(c.req, c.resp)
		got.Content, got.ErrorContent = "", "" // TestParseContent
		if got != c.want {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
}

func TestCompare(t *testing.T) {
	base := &Result{Text: "Once upon a time there was a dog", Finish: "length"}
	if d, ok := Compare(base, &Result{Text: base.Text, Finish: "length"}); !ok || d != "" {
		t.Errorf("equal results compare unequal: %s", d)
	}
	d, ok := Compare(base, &Result{Text: "Once upon a time there was a cat", Finish: "length"})
	if ok || !strings.Contains(d, "first difference at byte 29") || !strings.Contains(d, `was a cat"`) || !strings.Contains(d, `was a dog"`) {
		t.Errorf("different text: %v %s", ok, d)
	}
	d, ok = Compare(base, &Result{Text: base.Text, Finish: "stop"})
	if ok || !strings.Contains(d, `finish_reason "stop" where the baseline had "length"`) {
		t.Errorf("different finish_reason: %v %s", ok, d)
	}
}

func TestClassifyOverLimit(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want Status
		why  string
	}{
		{Result{Status: 400, ErrorCode: "context_length_exceeded"}, Pass, ""},
		{Result{Status: 413, ErrorCode: "request_too_large"}, Pass, ""},
		{Result{Status: 200, Text: "Once", Complete: true}, Fail, "over-length prompt answered with 200: the placeholder bug of DESIGN.md section 1"},
		{Result{Status: 200, Text: "Once", ErrorMessage: "prompt_mismatch"}, Fail, "answered with 200"},
		{Result{Status: 400, ErrorCode: "invalid_value"}, Warn, `code "invalid_value"`},
		{Result{Status: 500, ErrorCode: "prompt_mismatch"}, Fail, "got past admission"},
		{Result{Status: 429}, Warn, "refused with 429"},
		{Result{Transport: "timeout"}, Warn, "no answer"},
	} {
		got, why := ClassifyOverLimit(&c.r)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%+v: %v %q, want %v %q", c.r, got, why, c.want, c.why)
		}
	}
}

func TestFindMarkers(t *testing.T) {
	p, _ := NewPlan(testConfig())
	idx := markerIndex(p)
	m := p.Markers[7] // globex's second
	for _, c := range []struct {
		text string
		want int
	}{
		{"nothing here " + strings.Repeat("0123456789abcdef", 2), 0},
		{"whole word " + m.Word() + " in text", 1},
		{"upper case " + strings.ToUpper(m.Hex[3:11]) + "!", 1},
		{"just seven " + m.Hex[:7] + " digits", 0},
		{"eight at the end " + m.Hex[8:], 1},
		{"twice " + m.Hex + " " + m.Hex, 1},
	} {
		hits := FindMarkers(idx, c.text)
		if len(hits) != c.want {
			t.Errorf("%q: %d hits, want %d", c.text, len(hits), c.want)
			continue
		}
		if c.want > 0 && (hits[0].Marker != m || hits[0].Context == "") {
			t.Errorf("%q: hit %+v, want marker %s", c.text, hits[0], m.Word())
		}
	}
}

func TestEchoedPiece(t *testing.T) {
	prompt := "Remember the secret word canary-acme-0123456789abcdef. One day, a little girl"
	if got := EchoedPiece(prompt, "prompt has 300 tokens; this deployment accepts at most 256"); got != "" {
		t.Errorf("a plain message echoes %q", got)
	}
	msg := "cannot process '" + prompt[10:60] + "...'"
	if got := EchoedPiece(prompt, msg); got != prompt[10:10+echoLen] {
		t.Errorf("echo found %q, want %q", got, prompt[10:10+echoLen])
	}
}

// TestParseContent: Content holds every string of the body but the
// identifiers, each field of a stream joined across its events (after an
// error too), and ErrorContent the error's part of it.
func TestParseContent(t *testing.T) {
	stream := &Request{ID: 4, Stream: true}
	for _, c := range []struct {
		name          string
		req           *Request
		resp          Response
		content, errs string
	}{
		{"chunks joined per field", stream, Response{Status: 200, Body: []byte("id: 7\ndata: {\"id\":\"cmpl-9\",\"choices\":[{\"text\":\"Hi\"}]}\n\ndata: {\"id\":\"cmpl-9\",\"choices\":[{\"text\":\" you\",\"finish_reason\":\"length\"}]}\n\n: ping\n\ndata: [DONE]\n\n")},
			": ping\nHi you\nlength", ""},
		{"error chunk, then more", stream, Response{Status: 200, Body: []byte("data: {\"error\":{\"message\":\"boom\",\"request_id\":\"r-1\"}}\n\ndata: {\"choices\":[{\"text\":\"late\"}]}\n\n")},
			"boom\nlate", "boom"},
		{"non-2xx", &Request{ID: 3}, Response{Status: 400, Body: []byte(`{"error":{"message":"too long","param":"p"}}`)},
			"too long\np", "too long\np"},
		{"escapes decoded", &Request{ID: 3}, Response{Status: 200, Body: []byte(`{"choices":[{"text":"\u0063at","finish_reason":"stop"}]}`)},
			"stop\ncat", ""},
	} {
		r := Parse(c.req, c.resp)
		if r.Content != c.content || r.ErrorContent != c.errs {
			t.Errorf("%s: content %q, errors %q; want %q, %q", c.name, r.Content, r.ErrorContent, c.content, c.errs)
		}
	}
}
