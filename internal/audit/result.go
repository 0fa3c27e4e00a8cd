package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bulkhead-llm/bulkhead/internal/loadgen"
)

// Response is what the edge got back for one request: the raw material
// Parse reads.
type Response struct {
	// Status is the HTTP status; 0 when no response arrived.
	Status int
	// Body is the response body, up to the client's limit.
	Body []byte
	// Truncated says the body was longer than the limit.
	Truncated bool
	// Err says why no complete response arrived (a refused connection, a
	// timeout, a body cut off); "" when one did.
	Err string
	// RetryAfter is the wait a 429 or 503 asked for (its Retry-After in
	// seconds); 0 when it named none.
	RetryAfter time.Duration
	// Undecodable names the content coding of a body the client could
	// not decode (br, zstd): Body is then the bytes as sent, which no
	// search can read.
	Undecodable string
}

// Result is one request's outcome: what the checks judge.
type Result struct {
	// ID is the request's ID in the plan.
	ID int `json:"id"`
	// Status is the HTTP status; 0 when none arrived.
	Status int `json:"status"`
	// Transport says why no complete response arrived.
	Transport string `json:"transport,omitempty"`
	// Text is the generated text: a completion's text or a chat message's
	// content, the stream's chunks joined.
	Text string `json:"text,omitempty"`
	// Finish is the last finish_reason.
	Finish string `json:"finish_reason,omitempty"`
	// Complete is a success: status 200, a parsable body with a
	// finish_reason, no error, and for a stream, [DONE].
	Complete bool `json:"complete"`
	// ErrorCode, ErrorType and ErrorMessage are an OpenAI error object's
	// code, type and message, from an error response or an error inside a
	// stream. A numeric code (vLLM and llama.cpp put the HTTP status
	// there) is kept as its digits.
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorType    string `json:"error_type,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	// Problem says why a 200 is not Complete (a stream without [DONE], a
	// chunk that is not JSON...).
	Problem string `json:"problem,omitempty"`
	// Unparsed is the body when it could not be read as JSON or SSE, so
	// the canary check can still search it.
	Unparsed string `json:"unparsed,omitempty"`
	// CachedTokens is usage.prompt_tokens_details.cached_tokens, and
	// CachedReported says the response had that field at all.
	CachedTokens   int  `json:"cached_tokens,omitempty"`
	CachedReported bool `json:"cached_reported,omitempty"`
	// PromptTokens and CompletionTokens are the usage the response
	// reported, when UsageReported.
	PromptTokens     int  `json:"prompt_tokens,omitempty"`
	CompletionTokens int  `json:"completion_tokens,omitempty"`
	UsageReported    bool `json:"usage_reported,omitempty"`
	// Truncated says the body was longer than the client reads: only its
	// start was parsed and searched.
	Truncated bool `json:"truncated,omitempty"`
	// Undecodable names a content coding the client could not decode:
	// the body was not searched at all.
	Undecodable string `json:"undecodable,omitempty"`
	// Choices is how many choices (distinct indexes) the response held.
	Choices int `json:"choices,omitempty"`
	// Content is everything the body carried, for the canary search:
	// every JSON string value except identifiers, concatenated per JSON
	// path across a stream's events (so that a marker split across chunks
	// is whole again), events after an error or [DONE] included, and the
	// raw text of whatever is not JSON. Pieces are separated by newlines.
	Content string `json:"-"`
	// ErrorContent is the part of Content inside error objects, error
	// events, or the whole body of a non-2xx response: what the
	// error-echo check searches.
	ErrorContent string `json:"-"`
}

// redact passes every string of r through f.
func (r *Result) redact(f func(string) string) {
	for _, s := range []*string{&r.Transport, &r.Text, &r.Finish, &r.ErrorCode, &r.ErrorType, &r.ErrorMessage,
		&r.Problem, &r.Unparsed, &r.Content, &r.ErrorContent} {
		*s = f(*s)
	}
}

// Refused reports a response that declined the request with a status
// other than 2xx.
func (r *Result) Refused() bool { return r.Status >= 300 }

// OK reports a 2xx status.
func (r *Result) OK() bool { return r.Status >= 200 && r.Status < 300 }

// describe is a one-line account of the result for evidence.
func (r *Result) describe() string {
	switch {
	case r.Status == 0:
		return "no response: " + r.Transport
	case r.Refused():
		s := fmt.Sprintf("%d", r.Status)
		if r.ErrorCode != "" && r.ErrorCode != strconv.Itoa(r.Status) {
			s += " " + r.ErrorCode
		}
		if r.ErrorMessage != "" {
			s += ": " + clip(r.ErrorMessage, 160)
		} else if r.Unparsed != "" {
			s += ": " + clip(r.Unparsed, 160)
		}
		return s
	}
	s := fmt.Sprintf("%d with text %s", r.Status, quote(r.Text, 80))
	if r.Finish != "" {
		s += " (finish_reason " + r.Finish + ")"
	}
	if r.ErrorMessage != "" {
		s += ", then an error in the stream: " + clip(r.ErrorMessage, 120)
	}
	if r.Problem != "" {
		s += "; " + r.Problem
	}
	if r.Transport != "" {
		s += "; " + r.Transport
	}
	return s
}

// body is the part of a completion, chat completion, or stream chunk the
// audit reads.
type body struct {
	Choices []struct {
		Index   *int    `json:"index"`
		Text    *string `json:"text"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *int `json:"prompt_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
		Details          *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// maxEvent bounds one SSE event of a response.
const maxEvent = 1 << 20

// Parse reads one response to req. It never fails: what cannot be read is
// recorded in the Result.
func Parse(req *Request, resp Response) Result {
	r := Result{ID: req.ID, Status: resp.Status, Transport: resp.Err, Truncated: resp.Truncated, Undecodable: resp.Undecodable}
	if resp.Status == 0 {
		if r.Transport == "" {
			r.Transport = "no response"
		}
		return r
	}
	trimmed := bytes.TrimSpace(resp.Body)
	var c content
	if resp.Status < 200 || resp.Status >= 300 {
		whole := string(trimmed)
		r.ErrorCode, r.ErrorType, r.ErrorMessage = errorOf(trimmed)
		if r.ErrorMessage == "" && r.ErrorCode == "" {
			r.Unparsed = whole
		}
		c.body(whole, true)
		r.Content, r.ErrorContent = c.text()
		return r
	}
	p := parser{r: &r}
	if req.Stream && !bytes.HasPrefix(trimmed, []byte("{")) {
		p.stream(resp.Body)
	} else {
		p.whole(trimmed)
	}
	p.finish()
	if resp.Truncated {
		r.Complete, r.Problem = false, "the body was longer than the audit reads"
	}
	if r.Transport != "" {
		r.Complete = false
	}
	return r
}

// parser reads the body of a 2xx response into r.
type parser struct {
	r     *Result
	texts map[int]*strings.Builder // generated text by choice index
	c     content
}

// whole reads a non-streamed body.
func (p *parser) whole(b []byte) {
	r := p.r
	whole := string(b)
	p.c.body(whole, false)
	var v body
	if err := json.Unmarshal(b, &v); err != nil {
		r.Unparsed, r.Problem = whole, "the body is not JSON: "+err.Error()
		return
	}
	p.take(&v)
	switch {
	case hasError(v.Error):
		r.ErrorCode, r.ErrorType, r.ErrorMessage = errorOf(b)
		r.Problem = "a 200 whose body is an error"
	case len(v.Choices) == 0:
		r.Problem = "no choices in the body"
	case r.Finish == "":
		r.Problem = "no finish_reason"
	default:
		r.Complete = true
	}
}

// stream reads a server-sent event stream: "data: {chunk}" events ending
// with "data: [DONE]". The first error, non-JSON chunk or [DONE] settles
// the verdict; every event after it is still read into the content.
func (p *parser) stream(b []byte) {
	r := p.r
	whole := string(b)
	p.c.strayLines(whole)
	sr := loadgen.NewSSEReader(bytes.NewReader(b), maxEvent)
	settled := false
	settle := func(problem string) {
		if !settled {
			settled, r.Problem = true, problem
		}
	}
	for chunks := 0; ; chunks++ {
		ev, err := sr.Next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				settle(fmt.Sprintf("the stream ended without data: [DONE] after %d events", chunks))
			default:
				settle("the stream could not be read: " + err.Error())
				p.c.raw(whole, false) // the rest was never split into events
			}
			if chunks == 0 {
				r.Unparsed = whole
			}
			return
		}
		if r.Complete {
			r.Complete, r.Problem = false, "the stream went on after data: [DONE]"
		}
		if ev.Name == "error" {
			p.c.body(ev.Data, true)
			if !settled {
				r.ErrorCode, r.ErrorType, r.ErrorMessage = errorOf([]byte(ev.Data))
				if r.ErrorMessage == "" {
					r.ErrorMessage = ev.Data
				}
				settle("")
			}
			continue
		}
		if ev.Data == "[DONE]" {
			switch {
			case settled:
			case r.Finish == "":
				settle("the stream reached [DONE] without a finish_reason")
			default:
				r.Complete = true
				settle("")
			}
			continue
		}
		p.c.body(ev.Data, false)
		if settled {
			continue
		}
		var v body
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			settle("a stream chunk is not JSON: " + err.Error())
			r.Unparsed = ev.Data
			continue
		}
		if hasError(v.Error) {
			r.ErrorCode, r.ErrorType, r.ErrorMessage = errorOf([]byte(ev.Data))
			settle("")
		}
		p.take(&v)
	}
}

// take adds a body's text, finish_reason and usage to the response's.
func (p *parser) take(v *body) {
	r := p.r
	for i, c := range v.Choices {
		if c.Index != nil {
			i = *c.Index
		}
		if p.texts == nil {
			p.texts = map[int]*strings.Builder{}
		}
		t := p.texts[i]
		if t == nil {
			t = new(strings.Builder)
			p.texts[i] = t
		}
		switch {
		case c.Text != nil:
			t.WriteString(*c.Text)
		case c.Message != nil && c.Message.Content != nil:
			t.WriteString(*c.Message.Content)
		case c.Delta != nil && c.Delta.Content != nil:
			t.WriteString(*c.Delta.Content)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			r.Finish = *c.FinishReason
		}
	}
	if u := v.Usage; u != nil {
		if u.Details != nil && u.Details.CachedTokens != nil {
			r.CachedTokens, r.CachedReported = *u.Details.CachedTokens, true
		}
		if u.PromptTokens != nil || u.CompletionTokens != nil {
			r.UsageReported = true
			r.PromptTokens, r.CompletionTokens = deref(u.PromptTokens), deref(u.CompletionTokens)
		}
	}
}

// finish sets the Result's Text, Choices and Content. Text is the first
// choice's text; any other choice follows it, marked "[choice N]", so that
// an extra choice never passes for the same answer.
func (p *parser) finish() {
	idx := make([]int, 0, len(p.texts))
	for i := range p.texts {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var b strings.Builder
	for k, i := range idx {
		if k > 0 || i != 0 {
			fmt.Fprintf(&b, "\n[choice %d] ", i)
		}
		b.WriteString(p.texts[i].String())
	}
	p.r.Text, p.r.Choices = b.String(), len(idx)
	p.r.Content, p.r.ErrorContent = p.c.text()
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func hasError(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "{}" && s != `""`
}

// errorOf reads the code, type and message of an OpenAI error body,
// {"error": {"message": ..., "type": ..., "code": ...}}, or of a bare
// error object (vLLM's) or string. The code may be a string, a number or
// null.
func errorOf(b []byte) (code, typ, msg string) {
	var outer struct {
		Error json.RawMessage `json:"error"`
	}
	inner := b
	if json.Unmarshal(b, &outer) == nil && hasError(outer.Error) {
		inner = outer.Error
	}
	var s string
	if json.Unmarshal(inner, &s) == nil {
		return "", "", s
	}
	var obj struct {
		Message string          `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(inner, &obj) != nil {
		return "", "", ""
	}
	str := func(raw json.RawMessage) string {
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		if c := strings.TrimSpace(string(raw)); c != "null" {
			return c
		}
		return ""
	}
	return str(obj.Code), str(obj.Type), obj.Message
}

// clip shortens s to at most n bytes for a report, marking the cut. It
// escapes control characters, so that a server's message cannot drive the
// terminal that shows the report.
func clip(s string, n int) string {
	out := s
	if len(s) > n {
		out = strings.ToValidUTF8(s[:n], "")
	}
	out = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, out)
	if len(s) > n {
		out += fmt.Sprintf("… (%d bytes)", len(s))
	}
	return out
}

// quote is clip, Go-quoted.
func quote(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", strings.ToValidUTF8(s[:n], ""), len(s))
}
