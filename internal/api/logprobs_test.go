package api

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// The request fields: ranges, null, and top_logprobs only with logprobs.
func TestLogprobsRequest(t *testing.T) {
	const prompt = `{"model":"stories260K","prompt":"x"`
	const msgs = `{"model":"stories260K","messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		chat    bool
		body    string
		on      bool
		top     int
		errCode string // "" accepted
		param   string
	}{
		{false, prompt + `}`, false, 0, "", ""},
		{false, prompt + `,"logprobs":null}`, false, 0, "", ""},
		{false, prompt + `,"logprobs":0}`, true, 0, "", ""},
		{false, prompt + `,"logprobs":5}`, true, 5, "", ""},
		{false, prompt + `,"logprobs":6}`, false, 0, "invalid_value", "logprobs"},
		{false, prompt + `,"logprobs":-1}`, false, 0, "invalid_value", "logprobs"},
		{false, prompt + `,"logprobs":true}`, false, 0, "invalid_type", "logprobs"},
		{false, prompt + `,"logprobs":2,"echo":true}`, false, 0, "unsupported_value", "echo"},
		{true, msgs + `}`, false, 0, "", ""},
		{true, msgs + `,"logprobs":false}`, false, 0, "", ""},
		{true, msgs + `,"logprobs":null,"top_logprobs":null}`, false, 0, "", ""},
		{true, msgs + `,"logprobs":true}`, true, 0, "", ""},
		{true, msgs + `,"logprobs":true,"top_logprobs":0}`, true, 0, "", ""},
		{true, msgs + `,"logprobs":true,"top_logprobs":20}`, true, 20, "", ""},
		{true, msgs + `,"logprobs":true,"top_logprobs":21}`, false, 0, "invalid_value", "top_logprobs"},
		{true, msgs + `,"logprobs":true,"top_logprobs":-1}`, false, 0, "invalid_value", "top_logprobs"},
		{true, msgs + `,"top_logprobs":2}`, false, 0, "invalid_value", "top_logprobs"},
		{true, msgs + `,"logprobs":false,"top_logprobs":0}`, false, 0, "invalid_value", "top_logprobs"},
		{true, msgs + `,"logprobs":1}`, false, 0, "invalid_type", "logprobs"},
	} {
		err := checkBody(t, c.chat, c.body)
		if c.errCode != "" {
			wantParam(t, c.body, err, c.errCode, c.param)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		var req generationRequest = new(completionRequest)
		if c.chat {
			req = new(chatRequest)
		}
		if err := decodeBody(strings.NewReader(c.body), req); err != nil {
			t.Fatal(err)
		}
		g, _ := req.resolve(512)
		if g.sampling.Logprobs != c.on || g.sampling.TopLogprobs != c.top {
			t.Fatalf("%s: logprobs %v top %d, want %v %d", c.body, g.sampling.Logprobs, g.sampling.TopLogprobs, c.on, c.top)
		}
		if verr := g.sampling.Validate(); verr != nil {
			t.Fatalf("%s: sampler refuses the params: %v", c.body, verr)
		}
	}
}

// The wire shapes, as the tests read them (pointers and RawMessage tell
// null from absent).
type chatLPJSON struct {
	Content []struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		Bytes       []int   `json:"bytes"`
		TopLogprobs []struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
			Bytes   []int   `json:"bytes"`
		} `json:"top_logprobs"`
	} `json:"content"`
	Refusal json.RawMessage `json:"refusal"`
}

type complLPJSON struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type respJSON struct {
	Choices []struct {
		Text         string          `json:"text"`
		Message      *message        `json:"message"`
		Delta        *message        `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// events reads an SSE body into its JSON chunks, and whether it ended
// with [DONE].
func events(t *testing.T, body io.Reader) ([]respJSON, bool) {
	t.Helper()
	raw, _ := io.ReadAll(body)
	var out []respJSON
	done := false
	for _, ev := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %q", ev)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var r respJSON
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		out = append(out, r)
	}
	return out, done
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// checkChatEntries checks chat entries against the fake's reply: entry k
// is the (first+k)-th generated token ids[first+k], with top alternatives.
func checkChatEntries(t *testing.T, h *harness, lp chatLPJSON, ids []int, first, top int) {
	t.Helper()
	tok := h.fake.tok
	for k, e := range lp.Content {
		n := first + k
		want := fakeLogprobs(ids[n], n, top, tok.VocabSize())
		if e.Token != tok.PieceText(ids[n]) || !bytes.Equal(intsToBytes(e.Bytes), tok.Piece(ids[n])) || float32(e.Logprob) != want.Logprob {
			t.Fatalf("entry %d: %q %v %v, want token %d %q %v", n, e.Token, e.Bytes, e.Logprob, ids[n], tok.Piece(ids[n]), want.Logprob)
		}
		if len(e.TopLogprobs) != top {
			t.Fatalf("entry %d has %d alternatives, want %d", n, len(e.TopLogprobs), top)
		}
		for j, a := range e.TopLogprobs {
			w := want.Top[j]
			if a.Token != tok.PieceText(w.Token) || !bytes.Equal(intsToBytes(a.Bytes), tok.Piece(w.Token)) || float32(a.Logprob) != w.Logprob {
				t.Fatalf("entry %d alternative %d: %+v, want %d %v", n, j, a, w.Token, w.Logprob)
			}
			if j > 0 && a.Logprob > e.TopLogprobs[j-1].Logprob {
				t.Fatalf("entry %d: alternatives not most likely first: %+v", n, e.TopLogprobs)
			}
		}
	}
}

func intsToBytes(v []int) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

// Chat without streaming, through the OpenAI client: one entry per
// generated token, whose texts make up the message, with the requested
// number of alternatives; refusal is null.
func TestChatLogprobs(t *testing.T) {
	h := newHarness(t, nil)
	resp, err := h.client(keyA).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: embedded.Name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3), MaxTokens: openai.Int(40),
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := h.fake.calls()[0].Sampling; !s.Logprobs || s.TopLogprobs != 3 {
		t.Fatalf("submitted logprobs %v top %d", s.Logprobs, s.TopLogprobs)
	}
	ids := h.fake.tok.Encode(defaultReply, false)
	ch := resp.Choices[0]
	var lp chatLPJSON
	if err := json.Unmarshal([]byte(ch.Logprobs.RawJSON()), &lp); err != nil {
		t.Fatal(err)
	}
	if len(ch.Logprobs.Content) != len(ids) || int64(len(ids)) != resp.Usage.CompletionTokens || string(lp.Refusal) != "null" {
		t.Fatalf("%d entries for %d tokens (usage %d), refusal %s", len(ch.Logprobs.Content), len(ids), resp.Usage.CompletionTokens, lp.Refusal)
	}
	var text strings.Builder
	for _, e := range ch.Logprobs.Content {
		text.WriteString(e.Token)
		if len(e.TopLogprobs) != 3 {
			t.Fatalf("%d alternatives", len(e.TopLogprobs))
		}
	}
	if text.String() != ch.Message.Content {
		t.Fatalf("tokens spell %q, message %q", text.String(), ch.Message.Content)
	}
	checkChatEntries(t, h, lp, ids, 0, 3)
}

// Completions without streaming: tokens, their log probabilities, objects
// of the sampled token and the alternatives (sampled first), and text
// offsets in characters; with logprobs 0 the objects hold the sampled
// token alone.
func TestCompletionLogprobs(t *testing.T) {
	for _, top := range []int{0, 2} {
		h := newHarness(t, nil)
		body := `{"model":"stories260K","prompt":"x","max_tokens":40,"logprobs":` + string(rune('0'+top)) + `}`
		resp := post(t, h, "/v1/completions", keyA, body)
		raw, _ := io.ReadAll(resp.Body)
		var r respJSON
		if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		var lp complLPJSON
		if err := json.Unmarshal(r.Choices[0].Logprobs, &lp); err != nil {
			t.Fatal(err)
		}
		tok := h.fake.tok
		ids := tok.Encode(defaultReply, false)
		if len(lp.Tokens) != len(ids) || len(lp.TokenLogprobs) != len(ids) || len(lp.TopLogprobs) != len(ids) || len(lp.TextOffset) != len(ids) || r.Usage.CompletionTokens != len(ids) {
			t.Fatalf("logprobs=%d: lengths %d %d %d %d for %d tokens: %s", top, len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset), len(ids), raw)
		}
		var text strings.Builder
		for i, id := range ids {
			want := fakeLogprobs(id, i, top, tok.VocabSize())
			name := string(tok.Piece(id))
			if lp.Tokens[i] != name || float32(lp.TokenLogprobs[i]) != want.Logprob || lp.TextOffset[i] != utf8.RuneCountInString(text.String()) {
				t.Fatalf("logprobs=%d token %d: %q %v offset %d", top, i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i])
			}
			text.WriteString(name)
			m := lp.TopLogprobs[i]
			if len(m) != top+1 || float32(m[name]) != want.Logprob {
				t.Fatalf("logprobs=%d token %d: top_logprobs %v", top, i, m)
			}
			for _, a := range want.Top {
				if v, ok := m[string(tok.Piece(a.Token))]; !ok || float32(v) != a.Logprob {
					t.Fatalf("logprobs=%d token %d: top_logprobs %v lacks %q", top, i, m, tok.Piece(a.Token))
				}
			}
		}
		if text.String() != r.Choices[0].Text {
			t.Fatalf("tokens spell %q, text %q", text.String(), r.Choices[0].Text)
		}
		// The sampled token's name comes first in each object.
		first, _ := json.Marshal(lp.Tokens[0])
		if !strings.Contains(string(raw), `"top_logprobs":[{`+string(first)+`:`) {
			t.Fatalf("sampled token not first: %s", raw)
		}
	}
}

// Streams: each chunk carries the entries of the tokens whose text it
// releases (here every token's text is released at once), offsets run on
// across chunks, and every generated token has exactly one entry.
func TestLogprobsStream(t *testing.T) {
	for _, chat := range []bool{false, true} {
		h := newHarness(t, nil)
		path, body := "/v1/completions", `{"model":"stories260K","prompt":"x","max_tokens":40,"stream":true,"stream_options":{"include_usage":true},"logprobs":1}`
		if chat {
			path, body = "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"max_tokens":40,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}`
		}
		chunks, done := events(t, post(t, h, path, keyA, body).Body)
		ids := h.fake.tok.Encode(defaultReply, false)
		var text strings.Builder
		n, usage := 0, 0
		for _, c := range chunks {
			if c.Usage != nil {
				usage = c.Usage.CompletionTokens
			}
			if len(c.Choices) == 0 {
				continue
			}
			ch := c.Choices[0]
			s := ch.Text
			if chat {
				s = ch.Delta.Content
			}
			if s == "" {
				if !isNull(ch.Logprobs) {
					t.Fatalf("chat=%v: a chunk without text carries logprobs %s", chat, ch.Logprobs)
				}
				continue
			}
			var spelled strings.Builder
			if chat {
				var lp chatLPJSON
				if err := json.Unmarshal(ch.Logprobs, &lp); err != nil {
					t.Fatalf("chunk logprobs %s: %v", ch.Logprobs, err)
				}
				checkChatEntries(t, h, lp, ids, n, 2)
				for _, e := range lp.Content {
					spelled.WriteString(e.Token)
				}
				n += len(lp.Content)
			} else {
				var lp complLPJSON
				if err := json.Unmarshal(ch.Logprobs, &lp); err != nil {
					t.Fatalf("chunk logprobs %s: %v", ch.Logprobs, err)
				}
				for i, tk := range lp.Tokens {
					if lp.TextOffset[i] != utf8.RuneCountInString(text.String()+spelled.String()) || len(lp.TopLogprobs[i]) != 2 {
						t.Fatalf("token %d: offset %d, top %v", n+i, lp.TextOffset[i], lp.TopLogprobs[i])
					}
					spelled.WriteString(tk)
				}
				n += len(lp.Tokens)
			}
			if spelled.String() != s {
				t.Fatalf("chat=%v: chunk %q carries entries spelling %q", chat, s, spelled.String())
			}
			text.WriteString(s)
		}
		if !done || n != len(ids) || usage != n {
			t.Fatalf("chat=%v: done %v, %d entries, usage %d, %d tokens", chat, done, n, usage, len(ids))
		}
	}
}

// A stop sequence: every token consumed up to and including the one that
// completed the stop keeps its entry (usage counts them), though the text
// ends before the stop. Streaming, entries held with the stop's text come
// out with the last chunks, and no entry lags behind its text.
func TestLogprobsStop(t *testing.T) {
	tok := testTokenizer(t)
	ids := tok.Encode(defaultReply, false)
	full := tok.Decode(ids)
	const stop = " little cat"
	want := full[:strings.Index(full, stop)]
	// The tokens up to the one that completes the stop.
	consumed := 1
	for !strings.Contains(tok.Decode(ids[:consumed]), stop) {
		consumed++
	}
	for _, stream := range []bool{false, true} {
		h := newHarness(t, func(_ *Options, f *fakeBackend) { f.delay = time.Millisecond })
		body := `{"model":"stories260K","prompt":"x","max_tokens":40,"stop":"` + stop + `","logprobs":0,"stream":` + strconv.FormatBool(stream) + `,"stream_options":` + map[bool]string{true: `{"include_usage":true}`, false: `null`}[stream] + `}`
		resp := post(t, h, "/v1/completions", keyA, body)
		var chunks []respJSON
		if stream {
			var done bool
			chunks, done = events(t, resp.Body)
			if !done {
				t.Fatalf("stream did not finish: %+v", chunks)
			}
		} else {
			var r respJSON
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				t.Fatal(err)
			}
			chunks = []respJSON{r}
		}
		var text, spelled strings.Builder
		usage, n := -1, 0
		for _, c := range chunks {
			if c.Usage != nil {
				usage = c.Usage.CompletionTokens
			}
			if len(c.Choices) == 0 {
				continue
			}
			text.WriteString(c.Choices[0].Text)
			if !isNull(c.Choices[0].Logprobs) {
				var lp complLPJSON
				if err := json.Unmarshal(c.Choices[0].Logprobs, &lp); err != nil {
					t.Fatal(err)
				}
				for _, s := range lp.Tokens {
					spelled.WriteString(s)
				}
				n += len(lp.Tokens)
			}
			if !strings.HasPrefix(spelled.String(), text.String()) {
				t.Fatalf("stream=%v: entries spell %q, behind the text %q", stream, spelled.String(), text.String())
			}
		}
		sp := spelled.String()
		if text.String() != want || sp != tok.Decode(ids[:consumed]) || n != consumed || usage != n {
			t.Fatalf("stream=%v: text %q, %d entries spell %q, usage %d; want %d tokens", stream, text.String(), n, sp, usage, consumed)
		}
	}
}

// A character whose bytes span tokens: the tokens that hold its first
// bytes have entries with their raw bytes (text U+FFFD), carried with the
// chunk that releases the character, and text_offset counts characters.
func TestLogprobsMultiByte(t *testing.T) {
	const reply = "日本 cat"
	reply1 := func([]int) string { return reply }
	h := newHarness(t, func(_ *Options, f *fakeBackend) { f.reply = reply1 })
	tok := h.fake.tok
	ids := tok.Encode(reply, false)
	if len(ids) < 7 || len(tok.Piece(ids[1])) != 1 {
		t.Fatalf("%q encodes as %v; the test wants byte tokens", reply, ids)
	}
	body := `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"stream":true,"logprobs":true,"top_logprobs":1}`
	chunks, done := events(t, post(t, h, "/v1/chat/completions", keyA, body).Body)
	n := 0
	var text strings.Builder
	for _, c := range chunks {
		if len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		var lp chatLPJSON
		if err := json.Unmarshal(c.Choices[0].Logprobs, &lp); err != nil {
			t.Fatal(err)
		}
		checkChatEntries(t, h, lp, ids, n, 1)
		var raw []byte
		for _, e := range lp.Content {
			raw = append(raw, intsToBytes(e.Bytes)...)
			if !utf8.Valid(intsToBytes(e.Bytes)) && e.Token != "\uFFFD" {
				t.Fatalf("token of bytes %v shows as %q", e.Bytes, e.Token)
			}
		}
		if string(raw) != c.Choices[0].Delta.Content {
			t.Fatalf("chunk %q carries entries of bytes %q", c.Choices[0].Delta.Content, raw)
		}
		text.WriteString(c.Choices[0].Delta.Content)
		n += len(lp.Content)
	}
	if !done || n != len(ids) || text.String() != tok.Decode(ids) {
		t.Fatalf("done %v, %d entries for %d tokens, text %q", done, n, len(ids), text.String())
	}

	// text_offset: a token continuing a character shares its offset.
	resp := post(t, h, "/v1/completions", keyA, `{"model":"stories260K","prompt":"x","logprobs":0}`)
	var r respJSON
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	var lp complLPJSON
	if err := json.Unmarshal(r.Choices[0].Logprobs, &lp); err != nil {
		t.Fatal(err)
	}
	// " ", e6 97 a5, e6 9c ac, " c", "at"
	wantOff := []int{0, 1, 1, 1, 2, 2, 2, 3, 5}
	if len(ids) != len(wantOff) || !equalInts(lp.TextOffset, wantOff) {
		t.Fatalf("ids %v: text_offset %v, want %v", ids, lp.TextOffset, wantOff)
	}
}

// A token the backend gives no log probabilities for fails the request
// (logprobs_unavailable), before the stream starts or with an error event
// after it; nothing is made up.
func TestLogprobsMissingEntry(t *testing.T) {
	for _, c := range []struct {
		hole   int
		stream bool
	}{{3, false}, {1, true}, {5, true}} {
		h := newHarness(t, func(_ *Options, f *fakeBackend) { f.lpHole = c.hole })
		body := `{"model":"stories260K","prompt":"x","logprobs":1,"stream":` + strconv.FormatBool(c.stream) + `}`
		resp := post(t, h, "/v1/completions", keyA, body)
		if !c.stream || c.hole == 1 {
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 500 || !strings.Contains(string(raw), `"code":"logprobs_unavailable"`) {
				t.Fatalf("hole %d stream %v: status %d %s", c.hole, c.stream, resp.StatusCode, raw)
			}
			continue
		}
		chunks, done := events(t, resp.Body)
		last := chunks[len(chunks)-1]
		if done || last.Error == nil || last.Error.Code != "logprobs_unavailable" {
			t.Fatalf("stream ended with %+v, done %v", last, done)
		}
		for _, ch := range chunks[:len(chunks)-1] {
			if ch.Choices[0].FinishReason != nil {
				t.Fatalf("a failed stream has a finish_reason")
			}
		}
	}
}

// A request without logprobs is as before: logprobs null everywhere, and
// none asked of the engine.
func TestNoLogprobsUnchanged(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"stories260K","prompt":"x","max_tokens":5}`},
		{"/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"logprobs":false}`},
	} {
		for _, stream := range []bool{false, true} {
			body := strings.TrimSuffix(c.body, "}") + `,"stream":` + strconv.FormatBool(stream) + `}`
			resp := post(t, h, c.path, keyA, body)
			var chunks []respJSON
			if stream {
				chunks, _ = events(t, resp.Body)
			} else {
				raw, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(raw), `"logprobs":null`) {
					t.Fatalf("%s: %s", body, raw)
				}
				var r respJSON
				_ = json.Unmarshal(raw, &r)
				chunks = []respJSON{r}
			}
			for _, ch := range chunks {
				if len(ch.Choices) > 0 && !isNull(ch.Choices[0].Logprobs) {
					t.Fatalf("%s: logprobs %s", body, ch.Choices[0].Logprobs)
				}
			}
		}
	}
	for _, r := range h.fake.calls() {
		if r.Sampling.Logprobs || r.Sampling.TopLogprobs != 0 {
			t.Fatalf("submitted %+v", r.Sampling)
		}
	}
}

// A log probability of -Inf (a token the model rules out) is written as
// OpenAI writes it, -9999; NaN fails the request.
func TestLogprobsNonFinite(t *testing.T) {
	lp := &sample.Logprobs{Token: 300, Logprob: float32(math.Inf(-1)), Top: []sample.TokenLogprob{{Token: 301, Logprob: float32(math.Inf(-1))}}}
	if _, err := entryOf([]*sample.Logprobs{lp}, 0, 300); err != nil {
		t.Fatal(err)
	}
	for _, chat := range []bool{false, true} {
		f := logprobsFormat{on: true, top: 1, isChat: chat, tok: testTokenizer(t)}
		b, err := json.Marshal(f.render([]tokenEntry{{lp: lp}}))
		// chat: the token's and its alternative's; completions: also the
		// sampled token's in its top_logprobs object.
		want := map[bool]int{true: 2, false: 3}[chat]
		if err != nil || strings.Count(string(b), "-9999") != want {
			t.Fatalf("chat=%v: %s %v", chat, b, err)
		}
	}
	if _, err := entryOf([]*sample.Logprobs{{Token: 300, Logprob: float32(math.NaN())}}, 0, 300); err == nil || err.Code != "logprobs_unavailable" {
		t.Fatalf("NaN accepted: %v", err)
	}
	if _, err := entryOf([]*sample.Logprobs{{Token: 301}}, 0, 300); err == nil || err.Code != "logprobs_unavailable" {
		t.Fatalf("another token's entry accepted: %v", err)
	}
}

// The holdback rule, one token per batch so that it is deterministic: an
// entry comes with the first text released after its token; the tokens
// of a possible stop sequence are held with their text, and when the stop
// is found they come with the outcome.
func TestLogprobsHeldEntries(t *testing.T) {
	h := newHarness(t, nil)
	tok := h.fake.tok
	ids := tok.Encode("a little cat", false) // the encoder adds the leading space
	const stop = " little cat"               // begins at a token boundary
	if tok.Decode(ids[:1]) != " a" || tok.Decode(ids[1:]) != stop {
		t.Fatalf("%v spells %q %q", ids, tok.Decode(ids[:1]), tok.Decode(ids[1:]))
	}
	st := engine.NewStream()
	cctx, cancel := contextWithCancel()
	defer cancel()
	d := tok.NewDecoder(1)
	g := &generation{s: h.srv, c: &call{tenant: "a"}, prompt: []int{1}, stream: st, cancel: cancel, dec: d, flush: d.Flush,
		stops: stopMatcher{stops: []string{stop}}, logprobs: true}
	held := 0
	for i, id := range ids {
		st.PushWith([]int{id}, []*sample.Logprobs{fakeLogprobs(id, i, 0, tok.VocabSize())})
		if i == len(ids)-1 {
			// The Result is there when stopHit waits for it.
			st.Close(engine.Result{Finish: engine.FinishStop, Usage: engine.Usage{PromptTokens: 1, CompletionTokens: len(ids)}})
		}
		text, entries, out := g.next(cctx)
		if i == len(ids)-1 {
			if text != "" || out == nil || out.err != nil || out.finish != engine.FinishStop || len(entries) != held+1 {
				t.Fatalf("at the stop: text %q, %d entries (held %d), outcome %+v", text, len(entries), held, out)
			}
			for k, e := range entries {
				if e.lp.Token != ids[i-held+k] {
					t.Fatalf("entry %d is token %d, want %d", k, e.lp.Token, ids[i-held+k])
				}
			}
			break
		}
		if out != nil {
			t.Fatalf("token %d: outcome %+v", i, out)
		}
		switch {
		case text == "" && len(entries) == 0:
			held++
		case text != "" && len(entries) == held+1 && entries[held].lp.Token == id:
			held = 0
		default:
			t.Fatalf("token %d: text %q with %d entries (held %d)", i, text, len(entries), held)
		}
	}
	if held == 0 {
		t.Fatal("no token was held: the test shows nothing")
	}
}
