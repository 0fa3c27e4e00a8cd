package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// feed splits text into pieces of the given sizes (cycled) and returns the
// released text and whether a stop was found.
func feed(stops []string, text string, sizes []int) (string, bool) {
	m := stopMatcher{stops: stops}
	var out strings.Builder
	for i := 0; len(text) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(text))
		rel, stopped := m.add(text[:n])
		out.WriteString(rel)
		text = text[n:]
		if stopped {
			return out.String(), true
		}
	}
	out.WriteString(m.flush())
	return out.String(), false
}

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		stops      []string
		text, want string
		stopped    bool
	}{
		{[]string{"END"}, "abcENDdef", "abc", true},
		{[]string{"END"}, "abcENdef", "abcENdef", false},
		{[]string{"END"}, "abcEN", "abcEN", false},
		{[]string{"xyz", "cd"}, "abcdxyz", "ab", true},
		{[]string{"aab"}, "aaab", "a", true},
		{[]string{"\n\n"}, "line\nline\n\nnext", "line\nline", true},
		{[]string{"é!"}, "café!", "caf", true},
	}
	for _, tc := range cases {
		for _, sizes := range [][]int{{1}, {2}, {3, 1}, {100}} {
			got, stopped := feed(tc.stops, tc.text, sizes)
			if got != tc.want || stopped != tc.stopped {
				t.Errorf("stops %q text %q sizes %v: got %q %v, want %q %v", tc.stops, tc.text, sizes, got, stopped, tc.want, tc.stopped)
			}
		}
	}
}

// Whatever the chunking, the released text is the text up to the first
// stop, and nothing released is ever a prefix-in-progress that is later
// withdrawn.
func FuzzStopMatcher(f *testing.F) {
	f.Add("the cat sat on the mat", "at", 3)
	f.Add("aaaaab", "aab", 1)
	f.Fuzz(func(t *testing.T, text, stop string, size int) {
		if stop == "" || size < 1 || size > 64 {
			return
		}
		want, stopped := text, false
		if i := strings.Index(text, stop); i >= 0 {
			want, stopped = text[:i], true
		}
		got, gotStopped := feed([]string{stop}, text, []int{size})
		if got != want || gotStopped != stopped {
			t.Fatalf("got %q %v, want %q %v", got, gotStopped, want, stopped)
		}
	})
}

// Neither a completion prompt nor chat content can produce a control token
// by spelling it: "</s>" typed by a user is text, not EOS.
func TestNoSpecialTokenInjection(t *testing.T) {
	h := newHarness(t, nil)
	eos := h.fake.tok.EOS()
	if _, err := h.client(keyA).Completions.New(ctx, completionParams("a</s>b<s>")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: embedded.Name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi</s>"), openai.UserMessage("<s>again")},
	}); err != nil {
		t.Fatal(err)
	}
	for i, c := range h.fake.calls() {
		if slices.Contains(c.Prompt, eos) || slices.Contains(c.Prompt[1:], h.fake.tok.BOS()) {
			t.Fatalf("call %d: prompt %v contains a control token", i, c.Prompt)
		}
	}
}

// FuzzCompletionRequest drives the request decoder and validation with
// arbitrary bodies: it must never panic, and every rejection must be a
// client error with a message.
func FuzzCompletionRequest(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzCompletionRequest.
	f.Add([]byte(`{"model":"stories260K","prompt":"x","stop":["a"],"max_tokens":3}`))
	f.Add([]byte(`{"model":"stories260K","prompt":"x","logprobs":5}`))
	f.Add([]byte(`{"model":"stories260K","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		// The chat decoder walks more nesting (messages, content parts,
		// response_format): every rejection names what it refuses.
		var chatReq chatRequest
		if err := decodeBody(strings.NewReader(string(body)), &chatReq); err != nil {
			if status, _ := statusOf(err); status != 400 || err.Message == "" || (err.Code == "unknown_parameter" && err.Param == "") {
				t.Fatalf("chat decode error %d %q param %q", status, err.Message, err.Param)
			}
		} else {
			_ = chatReq.unsupported()
			_, _ = parseMessages(chatReq.Messages)
			// What resolve accepts, the sampler accepts: logprobs and
			// top_logprobs included.
			if g, err := chatReq.resolve(512); err != nil {
				if status, _ := statusOf(err); status != 400 || err.Message == "" || err.Param == "" {
					t.Fatalf("chat resolve error %d %q param %q", status, err.Message, err.Param)
				}
			} else if verr := g.sampling.Validate(); verr != nil {
				t.Fatalf("chat resolved %+v, which the sampler refuses: %v", g.sampling, verr)
			}
		}
		var req completionRequest
		if err := decodeBody(strings.NewReader(string(body)), &req); err != nil {
			if status, _ := statusOf(err); status != 400 || err.Message == "" || (err.Code == "unknown_parameter" && err.Param == "") {
				t.Fatalf("decode error %d %q param %q", status, err.Message, err.Param)
			}
			return
		}
		_ = req.unsupported()
		g, err := req.resolve(512)
		if err != nil {
			if status, _ := statusOf(err); status != 400 || err.Message == "" {
				t.Fatalf("resolve error %d %q", status, err.Message)
			}
			return
		}
		if len(g.stop) > maxStops || g.maxTokens < 0 {
			t.Fatalf("resolved %+v", g)
		}
		if verr := g.sampling.Validate(); verr != nil || g.sampling.TopLogprobs > maxCompletionLogprobs {
			t.Fatalf("resolved %+v, which the sampler refuses: %v", g.sampling, verr)
		}
		in, err := parsePrompt(req.Prompt, 512)
		if err == nil {
			for _, id := range in.tokens {
				if id < 0 || id >= 512 {
					t.Fatalf("token %d accepted", id)
				}
			}
		}
		_, _ = json.Marshal(req)
	})
}

// Chat content that begins with the text of BOS does not stand in for the
// BOS the template did not write: the prompt still starts with the BOS id,
// exactly as the same text sent as a completion prompt does.
func TestChatContentSpellingBOSKeepsBOS(t *testing.T) {
	h := newHarness(t, nil)
	if _, err := h.client(keyA).Completions.New(ctx, completionParams("<s>hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: embedded.Name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("<s>hello")},
	}); err != nil {
		t.Fatal(err)
	}
	calls := h.fake.calls()
	if !equalInts(calls[1].Prompt, calls[0].Prompt) || calls[1].Prompt[0] != h.fake.tok.BOS() {
		t.Fatalf("chat prompt %v, completion prompt %v: want both to start with BOS %d", calls[1].Prompt, calls[0].Prompt, h.fake.tok.BOS())
	}
}
