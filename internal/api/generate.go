package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bulkhead-llm/bulkhead/internal/chat"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// cancelWait bounds how long a request whose stop sequence was found waits
// for the backend's final Result (for honest usage) after cancelling.
const cancelWait = 2 * time.Second

// generationRequest is what the completion and chat bodies share.
type generationRequest interface {
	modelName() string
	unsupported() *errkind.Error
	resolve(vocab int) (genParams, *errkind.Error)
}

// readRequest decodes a generation request body of type T and runs the
// checks every endpoint shares: the model name, unsupported fields, and the
// sampling and length parameters.
func readRequest[T any, P interface {
	*T
	generationRequest
}](s *Server, r *http.Request) (P, genParams, *errkind.Error) {
	req := P(new(T))
	if err := decodeBody(r.Body, req); err != nil {
		return nil, genParams{}, err
	}
	if err := s.checkModel(req.modelName()); err != nil {
		return nil, genParams{}, err
	}
	if err := req.unsupported(); err != nil {
		return nil, genParams{}, err
	}
	p, err := req.resolve(s.tok.VocabSize())
	if err != nil {
		return nil, genParams{}, err
	}
	return req, p, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request, c *call) {
	req, p, rerr := readRequest[completionRequest](s, r)
	if rerr != nil {
		s.writeError(w, r, rerr)
		return
	}
	in, err := parsePrompt(req.Prompt, s.tok.VocabSize())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	prompt := in.tokens
	if !in.isIDs {
		// User text is encoded without special tokens: a prompt can never
		// spell a control token into existence.
		prompt = s.tok.Encode(in.text, s.tok.AddBOS())
	}
	s.generate(w, r, c, prompt, p, false)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, c *call) {
	req, p, rerr := readRequest[chatRequest](s, r)
	if rerr != nil {
		s.writeError(w, r, rerr)
		return
	}
	msgs, err := parseMessages(req.Messages)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	segs, err := s.tmpl.Render(msgs, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.generate(w, r, c, s.encodeChat(segs), p, true)
}

// encodeChat tokenizes a rendered conversation. Template text may spell
// special tokens; message text may not, and stays plain. The prompt is
// encoded as one string otherwise (tokenizer.EncodeParts): exactly what
// the model was trained on. BOS is added unless the template already
// wrote it: the first segment must be template text, since message text
// that spells BOS ("<s>hello" from the built-in template) stays plain text
// and must not stand in for the BOS id.
func (s *Server) encodeChat(segs []chat.Segment) []int {
	wroteBOS := s.bosText != "" && len(segs) > 0 && segs[0].Special && strings.HasPrefix(segs[0].Text, s.bosText)
	addBOS := s.tok.AddBOS() && !wroteBOS
	parts := make([]tokenizer.Part, len(segs))
	for i, seg := range segs {
		parts[i] = tokenizer.Part{Text: seg.Text, Trusted: seg.Special}
	}
	return s.tok.EncodeParts(parts, addBOS)
}

// outcome is how a generation ended, as the client will see it.
type outcome struct {
	finish engine.FinishReason // set on success
	err    *errkind.Error      // set on failure
	usage  engine.Usage
}

// generation consumes one request's stream: decoding, stop sequences and
// honest usage. It owns the cancel function of the request's context.
type generation struct {
	s       *Server
	c       *call
	prompt  []int
	stream  *engine.Stream
	cancel  context.CancelFunc
	dec     interface{ Add(int) string }
	flush   func() string
	stops   stopMatcher
	count   int // tokens received
	first   time.Time
	last    time.Time
	outcome *outcome

	// logprobs is true when the request asked for log probabilities:
	// pending holds the entries of tokens whose text is not released
	// yet, and chars counts the characters decoded so far (text_offset).
	logprobs bool
	pending  []tokenEntry
	chars    int
}

// admit admits req, whose MaxTokens is 0 when the client sent none:
// through the backend's own admission when it has one (engine.Admitter),
// else against its Limits, with such a request given as many tokens as
// the context (and the tenant's KV quota, if it has one) allows; at
// least 1, so that a prompt that already fills the context is refused
// for its length, with the numbers, rather than for max_tokens.
func (s *Server) admit(req engine.Request) (engine.Admitted, *errkind.Error) {
	if a, ok := s.backend.(engine.Admitter); ok {
		return a.Admit(req)
	}
	lim := s.backend.Limits()
	if req.MaxTokens == 0 {
		room := min(lim.ContextLen, lim.PoolTokens)
		if tl, ok := s.backend.(engine.TenantLimiter); ok {
			if n, ok := tl.TenantTokens(req.Tenant); ok {
				room = min(room, n)
			}
		}
		req.MaxTokens = max(1, room-len(req.Prompt))
	}
	return engine.Admit(req, lim)
}

// generate admits, submits and answers one request.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, c *call, prompt []int, p genParams, isChat bool) {
	admitted, rej := s.admit(engine.Request{Tenant: c.tenant, Prompt: prompt, MaxTokens: p.maxTokens, Sampling: p.sampling})
	if rej != nil {
		s.writeError(w, r, rej)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st, err := s.backend.Submit(ctx, admitted)
	if err != nil {
		if e := errkind.Of(err); clientLeft(r.Context(), e) {
			// The client left before the backend took the request, and
			// the backend refused it for that: record a disconnect
			// (499), not the backend's failure.
			s.failBeforeStart(w, r, &outcome{err: errDisconnected(r.Context().Err())})
			return
		}
		s.writeError(w, r, errkind.Of(err))
		return
	}
	d := s.tok.NewDecoder(prompt[len(prompt)-1])
	g := &generation{s: s, c: c, prompt: prompt, stream: st, cancel: cancel, dec: d, flush: d.Flush,
		stops: stopMatcher{stops: p.stop}, logprobs: p.sampling.Logprobs}
	c.promptToks = len(prompt)
	id := newID(isChat)
	lf := logprobsFormat{on: p.sampling.Logprobs, top: p.sampling.TopLogprobs, isChat: isChat, tok: s.tok}
	if p.stream {
		s.streamResponse(w, r, g, id, lf, p.includeUsage)
		return
	}
	text, entries, out := g.collect(r.Context())
	s.finishMetrics(g, out)
	if out.err != nil {
		s.failBeforeStart(w, r, out)
		return
	}
	writeJSON(w, http.StatusOK, fullResponse(id, s.opts.ModelName, isChat, text, lf.render(entries), out))
}

// next returns the text released by the next batch of tokens, with the
// log probabilities (when asked for) of the tokens consumed up to the last
// one that released text; or the outcome once generation has ended, with
// every entry still held. So an entry travels with the first text
// released after its token was consumed: the text of a token held back
// (an incomplete character, a possible stop sequence) comes later, and
// so does its entry. When a stop sequence is found, the tokens consumed
// up to and including the one that completed it keep their entries: they
// were generated, and usage counts them.
func (g *generation) next(ctx context.Context) (string, []tokenEntry, *outcome) {
	if g.outcome != nil {
		return "", g.takeEntries(len(g.pending)), g.outcome
	}
	toks, lps, res, err := g.stream.NextWith(ctx)
	if err != nil {
		// The client went away: the deferred cancel frees the request.
		return "", nil, g.end(nil, errDisconnected(err))
	}
	var b strings.Builder
	released := 0 // entries whose tokens precede the last text released
	for i, t := range toks {
		now := time.Now()
		if g.count == 0 {
			g.first = now
			g.s.metrics.ObserveTTFT(g.c.tenant, now.Sub(g.c.start))
		} else {
			g.s.metrics.ObserveInterToken(now.Sub(g.last))
		}
		g.last = now
		g.count++
		if g.logprobs {
			lp, lerr := entryOf(lps, i, t)
			if lerr != nil {
				// Fail the request rather than show a made-up number:
				// cancel it so the backend frees it at once.
				g.cancel()
				return "", nil, g.end(nil, lerr)
			}
			g.pending = append(g.pending, tokenEntry{lp: lp, offset: g.chars})
		}
		dec := g.dec.Add(t)
		if g.logprobs {
			g.chars += utf8.RuneCountInString(dec) // text_offset
		}
		rel, stopped := g.stops.add(dec)
		b.WriteString(rel)
		if stopped {
			out := g.stopHit()
			return b.String(), g.takeEntries(len(g.pending)), out
		}
		if rel != "" {
			released = len(g.pending)
		}
	}
	if res == nil {
		return b.String(), g.takeEntries(released), nil
	}
	if res.Err != nil {
		if clientLeft(ctx, res.Err) {
			// The backend ended the request because the client left
			// (Stream.Next hands over a queued Result before it looks
			// at ctx): a disconnect, as when Next sees ctx end first.
			return b.String(), nil, g.end(res, errDisconnected(ctx.Err()))
		}
		return b.String(), nil, g.end(res, res.Err)
	}
	// Success: the decoder's held bytes, then the matcher's held tail.
	rel, stopped := g.stops.add(g.flush())
	b.WriteString(rel)
	if stopped {
		return b.String(), g.takeEntries(len(g.pending)), g.end(res, nil, engine.FinishStop)
	}
	b.WriteString(g.stops.flush())
	return b.String(), g.takeEntries(len(g.pending)), g.end(res, nil)
}

// takeEntries hands over the first n held entries.
func (g *generation) takeEntries(n int) []tokenEntry {
	if n == 0 {
		return nil
	}
	out := g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil // let the handed-over entries go with their chunk
	}
	return out
}

// stopHit ends a generation whose output reached a stop sequence: the
// request is cancelled so the backend frees it at once, and the final
// Result is awaited briefly for its usage. A Result whose prompt count
// differs from the prompt submitted fails the request, as in end.
func (g *generation) stopHit() *outcome {
	g.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	var res *engine.Result
	for res == nil {
		var err error
		_, res, err = g.stream.Next(ctx)
		if err != nil {
			break
		}
	}
	usage := engine.Usage{PromptTokens: len(g.prompt), CompletionTokens: g.count}
	if res != nil && res.Usage.PromptTokens > 0 {
		if res.Usage.PromptTokens != len(g.prompt) {
			return g.end(res, errPromptMismatch(res.Usage.PromptTokens, len(g.prompt)))
		}
		usage.CachedTokens = res.Usage.CachedTokens
	}
	g.outcome = &outcome{finish: engine.FinishStop, usage: usage}
	return g.outcome
}

// end records the outcome of a Result (or of a local failure when res is
// nil). A successful Result whose prompt count differs from the prompt
// submitted is an integrity failure: the engine processed something other
// than this request's prompt, and its output must not reach the client.
func (g *generation) end(res *engine.Result, fail *errkind.Error, finish ...engine.FinishReason) *outcome {
	o := &outcome{err: fail}
	if res != nil {
		o.usage = res.Usage
	}
	if fail == nil {
		o.finish = res.Finish
		if len(finish) > 0 {
			o.finish = finish[0]
		}
		switch {
		case res.Usage.PromptTokens != len(g.prompt):
			o.err = errPromptMismatch(res.Usage.PromptTokens, len(g.prompt))
		case o.finish != engine.FinishStop && o.finish != engine.FinishLength:
			o.err = errkind.New(errkind.Internal, "invalid_result", "the engine ended the request without a finish reason or an error")
		}
		if o.err != nil {
			o.finish = ""
		}
	}
	if o.usage.CompletionTokens == 0 {
		o.usage.CompletionTokens = g.count
	}
	g.outcome = o
	return o
}

func errPromptMismatch(reported, submitted int) *errkind.Error {
	return errkind.New(errkind.Integrity, "prompt_mismatch", "the engine reported processing %d prompt tokens for a %d-token prompt; the output was withheld", reported, submitted)
}

// collect runs a generation to the end and returns its text and its
// tokens' log probabilities (when asked for), which must not be shown
// when the outcome is an error.
func (g *generation) collect(ctx context.Context) (string, []tokenEntry, *outcome) {
	var b strings.Builder
	var all []tokenEntry
	for {
		text, entries, out := g.next(ctx)
		b.WriteString(text)
		all = append(all, entries...)
		if out != nil {
			return b.String(), all, out
		}
	}
}

func (s *Server) finishMetrics(g *generation, out *outcome) {
	g.c.genToks = g.count
	if out.err == nil {
		s.metrics.AddTokens(g.c.tenant, out.usage.PromptTokens, out.usage.CompletionTokens)
	}
}

func newID(isChat bool) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	if isChat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// clientLeft reports whether the backend failed e because the client
// went away: ctx (the client's) has ended and the backend says it
// cancelled the request. A backend that failed for a reason of its own (a
// peer down, an integrity error) in the same moment is still reported as
// such.
func clientLeft(ctx context.Context, e *errkind.Error) bool {
	return ctx.Err() != nil && (e.Code == "request_cancelled" || isDisconnect(e))
}

func errDisconnected(cause error) *errkind.Error {
	return errkind.Wrap(errkind.Internal, "client_disconnected", cause, "the client disconnected")
}

// isDisconnect reports a failure caused by the client going away.
func isDisconnect(e *errkind.Error) bool {
	return e != nil && (e.Code == "client_disconnected" || errors.Is(e, context.Canceled))
}
