package audit

import (
	"fmt"
	"strings"
	"testing"
)

// planted returns the plan of testConfig, acme's first marker, and a
// mixed probe of globex's, streamed or not.
func planted(t *testing.T, stream bool) (*Plan, Marker, *Request) {
	t.Helper()
	p, err := NewPlan(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Requests {
		q := &p.Requests[i]
		if q.Tenant == "globex" && q.Phase == Mixed && q.Kind == Probe && q.Stream == stream {
			return p, p.Markers[0], q
		}
	}
	t.Fatal("no mixed probe of globex's")
	return nil, Marker{}, nil
}

// noAnswers is one Result per request of p, each with its ID and no
// answer, for a test to fill in.
func noAnswers(p *Plan) []Result {
	res := make([]Result, len(p.Requests))
	for i := range res {
		res[i] = Result{ID: i}
	}
	return res
}

// escaped is s with every character written as a JSON \u escape.
func escaped(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// TestCanaryAnywhereInTheBody: another tenant's marker fails the canaries
// check wherever in the body the server put it and however it encoded
// it, not only in the generated text of a well-formed response.
func TestCanaryAnywhereInTheBody(t *testing.T) {
	_, m, _ := planted(t, false)
	if m.Tenant != "acme" {
		t.Fatalf("marker %s is not acme's", m.Word())
	}
	w := m.Word()
	half := len(w) - 8
	for _, c := range []struct {
		name   string
		stream bool
		resp   Response
	}{
		{"text chunk after an error event", true, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\"}]}\n\nevent: error\ndata: {\"message\":\"boom\"}\n\ndata: {\"choices\":[{\"text\":\"" + w + "\"}]}\n\n")}},
		{"text chunk after an error chunk", true, Response{Status: 200, Body: []byte("data: {\"error\":{\"message\":\"boom\"}}\n\ndata: {\"choices\":[{\"text\":\"" + w + "\"}]}\n\ndata: [DONE]\n\n")}},
		{"text chunk after [DONE]", true, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"text\":\"" + w + "\"}]}\n\n")}},
		{"text after a chunk that is not JSON", true, Response{Status: 200, Body: []byte("data: {oops\n\ndata: {\"choices\":[{\"text\":\"" + w + "\"}]}\n\n")}},
		{"a stream line that is no SSE field", true, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"text\":\"Hi\",\"finish_reason\":\"length\"}]}\n\nupstream said " + w + "\n\ndata: [DONE]\n\n")}},
		{"split across chunks of another field", true, Response{Status: 200, Body: []byte("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"" + w[:half] + "\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning_content\":\"" + w[half:] + "\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")}},
		{"reasoning_content", false, Response{Status: 200, Body: []byte(`{"choices":[{"message":{"content":"Hi","reasoning_content":"` + w + `"},"finish_reason":"stop"}]}`)}},
		{"a 200 whose body is an error and choices", false, Response{Status: 200, Body: []byte(`{"error":{"message":"bad"},"choices":[{"text":"` + w + `"}]}`)}},
		{"error param", false, Response{Status: 400, Body: []byte(`{"error":{"message":"bad","param":"` + w + `","code":"x"}}`)}},
		{"\\u escapes in a non-OpenAI error", false, Response{Status: 422, Body: []byte(`{"detail":[{"msg":"bad","input":"` + escaped(w) + `"}]}`)}},
		{"\\u escapes in text", false, Response{Status: 200, Body: []byte(`{"choices":[{"text":"` + escaped(w) + `","finish_reason":"stop"}]}`)}},
		{"upper case in a plain-text error", false, Response{Status: 500, Body: []byte("internal error near " + strings.ToUpper(w))}},
	} {
		p, _, q := planted(t, c.stream)
		res := noAnswers(p)
		res[q.ID] = Parse(q, c.resp)
		ch := checkOf(t, Evaluate(p, res), CheckCanaries)
		if ev := evidence(ch); ch.Status != Fail || !strings.Contains(ev, "acme's prompt reached globex's response") {
			t.Errorf("%s: canaries %s, want FAIL\n%s", c.name, ch.Status, ev)
		} else if n := strings.Count(ev, "FAIL "); n != 1 {
			t.Errorf("%s: %d failures for one marker in one response, want 1\n%s", c.name, n, ev)
		}
	}
}

// TestIdentifiersAreNotContent: a random response id that happens to hold
// 8 digits of another tenant's marker is not a leak.
func TestIdentifiersAreNotContent(t *testing.T) {
	p, m, q := planted(t, true)
	id := "cmpl-" + m.Hex + m.Hex
	body := "id: " + id + "\ndata: {\"id\":\"" + id + "\",\"system_fingerprint\":\"fp_" + m.Hex[:10] + "\",\"choices\":[{\"text\":\"Hi\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"
	res := noAnswers(p)
	res[q.ID] = Parse(q, Response{Status: 200, Body: []byte(body)})
	if !res[q.ID].Complete {
		t.Fatalf("parse: %+v", res[q.ID])
	}
	if ch := checkOf(t, Evaluate(p, res), CheckCanaries); ch.Status == Fail {
		t.Errorf("an id was taken for a leak:\n%s", evidence(ch))
	}
}

// TestFindMarkersAnyBytes: bytes that are not UTF-8, or letters whose
// lower case is shorter, neither hide a marker nor crash the search.
func TestFindMarkersAnyBytes(t *testing.T) {
	p, m, _ := planted(t, false)
	idx := markerIndex(p)
	for _, prefix := range []string{strings.Repeat("\xff", 40), strings.Repeat("İ", 40), strings.Repeat("Ⱥ", 40)} {
		hits := FindMarkers(idx, prefix+" said "+strings.ToUpper(m.Word())+" then")
		if len(hits) != 1 || hits[0].Marker != m || !strings.Contains(strings.ToLower(hits[0].Context), m.Hex) {
			t.Errorf("after %q...: hits %+v, want %s with it in the context", prefix[:4], hits, m.Word())
		}
	}
}

// TestCanariesWithNothingPlanted: when no canary prompt was answered, no
// marker reached the server's memory, and the check says so instead of
// passing.
func TestCanariesWithNothingPlanted(t *testing.T) {
	f := &fake{ctxLen: 256}
	p, _ := NewPlan(testConfig())
	res, err := Run(t.Context(), p, f, Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range p.Requests {
		if q.Kind == Canary {
			res[i] = Parse(&p.Requests[i], Response{Status: 429, Body: []byte(`{"error":{"message":"slow down","code":"rate_limit_exceeded"}}`)})
		}
	}
	if c := checkOf(t, Evaluate(p, res), CheckCanaries); c.Status != Warn || !strings.Contains(evidence(c), "no marker was planted") ||
		!strings.Contains(c.Summary, "0 of 24 canary prompts answered") {
		t.Errorf("canaries with no canary answered: %s %s\n%s", c.Status, c.Summary, evidence(c))
	}
}

// TestErrorEchoInAnyField: an error that echoes the prompt in a field
// other than its message fails error-echo.
func TestErrorEchoInAnyField(t *testing.T) {
	p, _ := NewPlan(testConfig())
	res := noAnswers(p)
	var q *Request
	for i := range p.Requests {
		if p.Requests[i].Kind == OverLimit && p.Requests[i].Endpoint == Chat {
			q = &p.Requests[i]
			break
		}
	}
	body := fmt.Sprintf(`{"error":{"message":"too long","code":"context_length_exceeded","param":%q}}`, q.PromptText()[:100])
	res[q.ID] = Parse(q, Response{Status: 400, Body: []byte(body)})
	if c := checkOf(t, Evaluate(p, res), CheckErrorEcho); c.Status != Fail || !strings.Contains(evidence(c), q.String()) ||
		!strings.Contains(evidence(c), "the error message holds part of its own prompt's marker") {
		t.Errorf("error-echo: %s %s\n%s", c.Status, c.Summary, evidence(c))
	}
}

// TestCompareWholeAnswer: the same text is not the same answer when the
// usage or the number of choices differ; the cached token count may.
func TestCompareWholeAnswer(t *testing.T) {
	base := &Result{Text: "Once upon a time", Finish: "length", Choices: 1, UsageReported: true, PromptTokens: 50, CompletionTokens: 24, CachedTokens: 0, CachedReported: true}
	for _, c := range []struct {
		name string
		edit func(*Result)
		same bool
		want string
	}{
		{"cached tokens", func(r *Result) { r.CachedTokens = 48 }, true, ""},
		{"no usage", func(r *Result) { r.UsageReported, r.PromptTokens, r.CompletionTokens = false, 0, 0 }, true, ""},
		{"prompt tokens", func(r *Result) { r.PromptTokens = 1 }, false, "usage.prompt_tokens 1 where the baseline had 50"},
		{"completion tokens", func(r *Result) { r.CompletionTokens = 23 }, false, "usage.completion_tokens 23"},
		{"a second choice", func(r *Result) { r.Choices = 2 }, false, "2 choices where the baseline had 1"},
	} {
		got := *base
		c.edit(&got)
		d, same := Compare(base, &got)
		if same != c.same || !strings.Contains(d, c.want) {
			t.Errorf("%s: %v %q, want %v %q", c.name, same, d, c.same, c.want)
		}
	}
	// A second choice is never folded into the first's text.
	r := Parse(&Request{}, Response{Status: 200, Body: []byte(`{"choices":[{"index":0,"text":"a","finish_reason":"length"},{"index":1,"text":"b","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)})
	if r.Text != "a\n[choice 1] b" || r.Choices != 2 || !r.UsageReported || r.PromptTokens != 5 || r.CompletionTokens != 2 {
		t.Errorf("two choices: %+v", r)
	}
}

// TestTruncatedBodyNotClaimedSearched: a body longer than the audit reads
// was searched only in part, whatever its status, and the canaries check
// says so instead of passing.
func TestTruncatedBodyNotClaimedSearched(t *testing.T) {
	for _, status := range []int{200, 500} {
		p, _, q := planted(t, false)
		res := make([]Result, len(p.Requests))
		for i := range res {
			res[i] = Result{ID: i, Status: 200, Complete: true}
			if p.Requests[i].Kind == Canary {
				res[i].Text = "ok" // planted
			}
		}
		res[q.ID] = Parse(q, Response{Status: status, Body: []byte(strings.Repeat("x", 1000)), Truncated: true})
		c := checkOf(t, Evaluate(p, res), CheckCanaries)
		if ev := evidence(c); c.Status != Warn || !strings.Contains(ev, "only part of it was searched") {
			t.Errorf("status %d: canaries %s %s\n%s", status, c.Status, c.Summary, ev)
		}
	}
}

// TestAnotherTenantsKeyIsALeak: a server that puts acme's API key in
// globex's response leaks a secret across tenants; the client replaces
// the key with acme's placeholder (so no report holds it) and the
// canaries check fails on it. A tenant's own key echoed back is not a
// cross-tenant leak.
func TestAnotherTenantsKeyIsALeak(t *testing.T) {
	p, _, q := planted(t, false)
	for _, c := range []struct {
		text string
		fail bool
	}{
		{"your colleague's key is " + KeyPlaceholder("acme"), true},
		{"your own key is " + KeyPlaceholder("globex"), false},
	} {
		res := noAnswers(p)
		res[q.ID] = Parse(q, Response{Status: 200, Body: []byte(`{"choices":[{"text":"` + c.text + `","finish_reason":"stop"}]}`)})
		ch := checkOf(t, Evaluate(p, res), CheckCanaries)
		if got := ch.Status == Fail && strings.Contains(evidence(ch), "acme's API key reached globex's response"); got != c.fail {
			t.Errorf("%q: canaries %s, want FAIL %v\n%s", c.text, ch.Status, c.fail, evidence(ch))
		}
	}
}
