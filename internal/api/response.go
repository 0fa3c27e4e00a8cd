package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
)

// statusClientClosed records, in metrics and logs only, a request whose
// client went away before it finished (nginx's convention); nothing is
// written to the connection.
const statusClientClosed = 499

type usageJSON struct {
	PromptTokens        int                `json:"prompt_tokens"`
	CompletionTokens    int                `json:"completion_tokens"`
	TotalTokens         int                `json:"total_tokens"`
	PromptTokensDetails promptTokenDetails `json:"prompt_tokens_details"`
}

type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func usageOf(u engine.Usage) *usageJSON {
	return &usageJSON{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		TotalTokens: u.PromptTokens + u.CompletionTokens, PromptTokensDetails: promptTokenDetails{CachedTokens: u.CachedTokens}}
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

// choice serves both endpoints: Text for completions, Message or Delta for
// chat.
type choice struct {
	Index        int      `json:"index"`
	Text         *string  `json:"text,omitempty"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	Logprobs     any      `json:"logprobs"`
	FinishReason *string  `json:"finish_reason"`
}

type response struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []choice   `json:"choices"`
	Usage   *usageJSON `json:"usage,omitempty"`
}

// fullResponse is a non-streaming response; logprobs is the choice's
// (nil: null).
func fullResponse(id, model string, isChat bool, text string, logprobs any, out *outcome) response {
	finish := string(out.finish)
	ch := choice{FinishReason: &finish, Logprobs: logprobs}
	obj := "text_completion"
	if isChat {
		obj = "chat.completion"
		ch.Message = &message{Role: "assistant", Content: text}
	} else {
		ch.Text = &text
	}
	return response{ID: id, Object: obj, Created: time.Now().Unix(), Model: model, Choices: []choice{ch}, Usage: usageOf(out.usage)}
}

// sse writes Server-Sent Events for one streamed response.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	id      string
	model   string
	created int64
	isChat  bool
	lf      logprobsFormat
}

func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) chunk(ch *choice, usage *usageJSON) response {
	obj := "text_completion"
	if e.isChat {
		obj = "chat.completion.chunk"
	}
	r := response{ID: e.id, Object: obj, Created: e.created, Model: e.model, Choices: []choice{}, Usage: usage}
	if ch != nil {
		r.Choices = []choice{*ch}
	}
	return r
}

// text sends a chunk of text with the entries of the tokens it releases.
func (e *sse) text(s string, entries []tokenEntry) error {
	ch := choice{Logprobs: e.lf.render(entries)}
	if e.isChat {
		ch.Delta = &message{Content: s}
	} else {
		ch.Text = &s
	}
	return e.send(e.chunk(&ch, nil))
}

// finish sends the finish_reason, with the entries of tokens whose text
// was never released (a stop sequence's), if any.
func (e *sse) finish(reason engine.FinishReason, entries []tokenEntry) error {
	f := string(reason)
	ch := choice{FinishReason: &f}
	if len(entries) > 0 {
		ch.Logprobs = e.lf.render(entries)
	}
	if e.isChat {
		ch.Delta = &message{}
	} else {
		empty := ""
		ch.Text = &empty
	}
	return e.send(e.chunk(&ch, nil))
}

// streamResponse answers a streaming request. The 200 and the event
// stream start only once the first text (or the end) is known, so that a
// request that fails before producing anything gets a plain error status.
// After that, a failure ends the stream with an error event and neither a
// finish_reason nor [DONE]: clients see an error, never a short success.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, g *generation, id string, lf logprobsFormat, includeUsage bool) {
	ctx := r.Context()
	isChat := lf.isChat
	// next hands out entries only with text or with the outcome, so none
	// is lost while this waits for the first text.
	text, entries, out := g.next(ctx)
	for text == "" && out == nil {
		text, entries, out = g.next(ctx)
	}
	if out != nil && out.err != nil {
		s.finishMetrics(g, out)
		s.failBeforeStart(w, r, out)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w), id: id, model: s.opts.ModelName, created: time.Now().Unix(), isChat: isChat, lf: lf}
	if isChat {
		role := choice{Delta: &message{Role: "assistant", Content: ""}}
		if e.send(e.chunk(&role, nil)) != nil {
			return // the client is gone; the deferred cancel frees the request
		}
	}
	for {
		if text != "" {
			if e.text(text, entries) != nil {
				return
			}
			entries = nil
		}
		if out != nil {
			break
		}
		text, entries, out = g.next(ctx)
	}
	s.finishMetrics(g, out)
	if out.err != nil {
		if isDisconnect(out.err) {
			return
		}
		_, body := bodyOf(out.err)
		_ = e.send(body)
		s.logFailure(r, out)
		return
	}
	if e.finish(out.finish, entries) != nil {
		return
	}
	if includeUsage && e.send(e.chunk(nil, usageOf(out.usage))) != nil {
		return
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	_ = e.rc.Flush()
}

// failBeforeStart reports a failure that happened before any byte of the
// response was written.
func (s *Server) failBeforeStart(w http.ResponseWriter, r *http.Request, out *outcome) {
	if isDisconnect(out.err) {
		if rec, ok := w.(*recorder); ok {
			rec.status = statusClientClosed
		}
		return
	}
	s.writeError(w, r, out.err)
}

// logFailure logs a failure reported inside an event stream (the status
// was already 200).
func (s *Server) logFailure(r *http.Request, out *outcome) {
	status, _ := statusOf(out.err)
	s.log.WarnContext(r.Context(), "stream failed after it started", "path", r.URL.Path, "error_status", status,
		"kind", out.err.Kind.String(), "code", out.err.Code, "cause", causeOf(out.err))
}
