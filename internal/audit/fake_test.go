package audit

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// fake is an in-process OpenAI-compatible endpoint for tests: a
// deterministic "model" whose text is a function of the prompt, honest by
// default, with switches that plant each bug the audit must catch.
type fake struct {
	ctxLen int // context length in tokens (a word or an id is a token)

	badKey      string // this tenant's key is refused with 401
	placeholder bool   // over-limit prompts are answered (DESIGN.md section 1)
	leak        bool   // responses carry another tenant's last prompt
	drift       bool   // a prompt seen before gets a different answer
	echo        bool   // error messages quote the prompt
	sharedCache bool   // the prefix cache is one namespace for all tenants
	noUsage     bool   // no usage in responses
	zeroCached  bool   // usage always reports 0 cached tokens
	sticky      bool   // every answer to a later tenant depends on the first tenant's first prompt
	throttle    int    // every throttle-th request, if never sent before, is answered 429 (0: none)
	delay       time.Duration
	overDelay   time.Duration // more delay for over-limit prompts, so that they overlap

	mu          sync.Mutex
	inflight    int
	maxInflight int
	overInfl    int // over-limit requests in flight
	maxOverInfl int
	requests    int
	last        map[string]string   // tenant → its last canary prompt
	seen        map[string]bool     // tenant + prompt, for drift
	cache       map[string][]string // namespace → prompts seen, for cached tokens
	sent        map[string]bool     // tenant + endpoint + body, for throttle
	firstTenant string              // the first tenant served, for sticky
	firstPrompt string              // and its first prompt
}

// fakeRequest is the part of a request body the fake reads.
type fakeRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     int     `json:"max_tokens"`
	Temperature   float64 `json:"temperature"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

var fakeWords = []string{" the", " cat", " ran", " to", " a", " big", " red", " ball", " and", " she", " was", " happy", "."}

func (f *fake) Send(ctx context.Context, tenant string, ep Endpoint, body []byte) Response {
	f.mu.Lock()
	f.requests++
	n := f.requests
	f.mu.Unlock()
	defer f.track(&f.inflight, &f.maxInflight)()
	if f.delay > 0 && !sleep(ctx, f.delay) {
		return Response{Err: ctx.Err().Error()}
	}
	f.mu.Lock()
	if f.sent == nil {
		f.sent = map[string]bool{}
	}
	first := !f.sent[tenant+string(ep)+string(body)]
	f.sent[tenant+string(ep)+string(body)] = true
	f.mu.Unlock()
	if f.throttle > 0 && n%f.throttle == 0 && first {
		return Response{Status: 429, RetryAfter: time.Millisecond, Body: []byte(`{"error":{"message":"too many requests","code":"rate_limit_exceeded"}}`)}
	}
	if tenant == f.badKey {
		return Response{Status: 401, Body: []byte(`{"error":{"message":"invalid API key","type":"authentication_error","code":"invalid_api_key"}}`)}
	}
	var req fakeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return Response{Status: 400, Body: []byte(`{"error":{"message":"bad json","code":"invalid_json"}}`)}
	}
	var prompt string
	var tokens int
	if ep == Chat {
		prompt = req.Messages[0].Content
		tokens = len(strings.Fields(prompt)) + 1
	} else if json.Unmarshal(req.Prompt, &prompt) == nil {
		tokens = len(strings.Fields(prompt)) + 1
	} else {
		var ids []int
		if err := json.Unmarshal(req.Prompt, &ids); err != nil {
			return Response{Status: 400, Body: []byte(`{"error":{"message":"bad prompt","code":"invalid_type"}}`)}
		}
		prompt, tokens = fmt.Sprint(ids[:min(len(ids), 8)]), len(ids)
	}
	if tokens > f.ctxLen {
		defer f.track(&f.overInfl, &f.maxOverInfl)()
		if !sleep(ctx, f.overDelay) {
			return Response{Err: ctx.Err().Error()}
		}
	}
	if tokens+req.MaxTokens > f.ctxLen && !f.placeholder {
		msg := fmt.Sprintf("prompt has %d tokens; this deployment accepts at most %d", tokens, f.ctxLen)
		if f.echo {
			msg += ": " + prompt[:min(len(prompt), 300)]
		}
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": "context_length_exceeded"}})
		return Response{Status: 400, Body: b}
	}

	f.mu.Lock()
	if f.last == nil {
		f.last, f.seen, f.cache = map[string]string{}, map[string]bool{}, map[string][]string{}
	}
	if f.firstTenant == "" {
		f.firstTenant, f.firstPrompt = tenant, prompt
	}
	text := fakeText(prompt, req.MaxTokens)
	if f.sticky && tenant != f.firstTenant {
		text = fakeText(f.firstPrompt+prompt, req.MaxTokens)
	}
	if f.leak {
		// The first other tenant's last canary prompt rides along.
		var others []string
		for t := range f.last {
			if t != tenant && strings.Contains(f.last[t], "canary-") {
				others = append(others, t)
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			p := f.last[others[0]]
			text += " " + p[:min(len(p), 200)]
		}
	}
	if f.drift && f.seen[tenant+"\x00"+prompt] {
		text = strings.Replace(text, " ", " busy ", 1)
	}
	f.seen[tenant+"\x00"+prompt] = true
	if strings.Contains(prompt, "canary-") {
		f.last[tenant] = prompt
	}
	ns := tenant
	if f.sharedCache {
		ns = ""
	}
	cached := 0
	for _, p := range f.cache[ns] {
		cached = max(cached, commonWords(p, prompt))
	}
	f.cache[ns] = append(f.cache[ns], prompt)
	f.mu.Unlock()
	if f.zeroCached {
		cached = 0
	}

	usage := map[string]any{"prompt_tokens": tokens, "completion_tokens": req.MaxTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
	if f.noUsage {
		usage = nil
	}
	choice := func(s string, finish any) map[string]any {
		if ep == Chat {
			if req.Stream {
				return map[string]any{"index": 0, "delta": map[string]any{"content": s}, "finish_reason": finish}
			}
			return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": s}, "finish_reason": finish}
		}
		return map[string]any{"index": 0, "text": s, "finish_reason": finish}
	}
	if !req.Stream {
		b, _ := json.Marshal(map[string]any{"id": "cmpl-1", "choices": []any{choice(text, "length")}, "usage": usage})
		return Response{Status: 200, Body: b}
	}
	var b strings.Builder
	event := func(v any) {
		j, _ := json.Marshal(v)
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	for _, w := range strings.SplitAfter(text, " ") {
		event(map[string]any{"choices": []any{choice(w, nil)}})
	}
	event(map[string]any{"choices": []any{choice("", "length")}})
	if usage != nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		event(map[string]any{"choices": []any{}, "usage": usage})
	}
	b.WriteString("data: [DONE]\n\n")
	return Response{Status: 200, Body: []byte(b.String())}
}

// fakeText is the fake model's greedy continuation of prompt.
func fakeText(prompt string, maxTokens int) string {
	h := sha256.Sum256([]byte(prompt))
	var b strings.Builder
	for i := range min(maxTokens, len(h)) {
		b.WriteString(fakeWords[int(h[i])%len(fakeWords)])
	}
	return b.String()
}

func commonWords(a, b string) int {
	x, y := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

// audit runs a whole audit against f.
func (f *fake) audit(cfg Config, o Options) (Report, error) {
	p, err := NewPlan(cfg)
	if err != nil {
		return Report{}, err
	}
	res, err := Run(context.Background(), p, f, o)
	if err != nil {
		return Report{}, err
	}
	return Evaluate(p, res), nil
}

func testConfig() Config {
	return Config{Tenants: []string{"acme", "globex", "hooli"}, Model: "m", Seed: 7, Rounds: 2, ContextLen: 256, Nonce: "0a1b2c3d"}
}

// track counts one more request in flight in *n, keeps the most in *peak,
// and returns the func that counts it out again.
func (f *fake) track(n, peak *int) func() {
	f.mu.Lock()
	*n++
	*peak = max(*peak, *n)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		*n--
		f.mu.Unlock()
	}
}
