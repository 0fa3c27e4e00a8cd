package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
	// ErrorCode and ErrorMessage are an OpenAI error object's code and
	// message, from an error response or an error inside a stream.
	ErrorCode    string `json:"error_code,omitempty"`
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
		if r.ErrorCode != "" {
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
		Details *struct {
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
	r := Result{ID: req.ID, Status: resp.Status, Transport: resp.Err}
	if resp.Status == 0 {
		if r.Transport == "" {
			r.Transport = "no response"
		}
		return r
	}
	trimmed := bytes.TrimSpace(resp.Body)
	if resp.Status < 200 || resp.Status >= 300 {
		r.ErrorCode, r.ErrorMessage = errorOf(trimmed)
		if r.ErrorMessage == "" && r.ErrorCode == "" {
			r.Unparsed = string(trimmed)
		}
		return r
	}
	if req.Stream && !bytes.HasPrefix(trimmed, []byte("{")) {
		parseStream(&r, resp.Body)
	} else {
		parseWhole(&r, trimmed)
	}
	if resp.Truncated {
		r.Complete, r.Problem = false, "the body was longer than the audit reads"
	}
	if r.Transport != "" {
		r.Complete = false
	}
	return r
}

// parseWhole reads a non-streamed body.
func parseWhole(r *Result, b []byte) {
	var v body
	if err := json.Unmarshal(b, &v); err != nil {
		r.Unparsed, r.Problem = string(b), "the body is not JSON: "+err.Error()
		return
	}
	if hasError(v.Error) {
		r.ErrorCode, r.ErrorMessage = errorOf(b)
		r.Problem = "a 200 whose body is an error"
		return
	}
	take(r, &v)
	switch {
	case len(v.Choices) == 0:
		r.Problem = "no choices in the body"
	case r.Finish == "":
		r.Problem = "no finish_reason"
	default:
		r.Complete = true
	}
}

// parseStream reads a server-sent event stream: "data: {chunk}" events
// ending with "data: [DONE]".
func parseStream(r *Result, b []byte) {
	sr := loadgen.NewSSEReader(bytes.NewReader(b), maxEvent)
	var text strings.Builder
	defer func() { r.Text = text.String() }()
	for chunks := 0; ; chunks++ {
		ev, err := sr.Next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				r.Problem = fmt.Sprintf("the stream ended without data: [DONE] after %d events", chunks)
			default:
				r.Problem = "the stream could not be read: " + err.Error()
			}
			if chunks == 0 {
				r.Unparsed = string(b)
			}
			return
		}
		if ev.Name == "error" {
			r.ErrorCode, r.ErrorMessage = errorOf([]byte(ev.Data))
			if r.ErrorMessage == "" {
				r.ErrorMessage = ev.Data
			}
			return
		}
		if ev.Data == "[DONE]" {
			if r.Finish == "" {
				r.Problem = "the stream reached [DONE] without a finish_reason"
				return
			}
			r.Complete = true
			return
		}
		var v body
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			r.Problem = "a stream chunk is not JSON: " + err.Error()
			r.Unparsed = ev.Data
			return
		}
		if hasError(v.Error) {
			r.ErrorCode, r.ErrorMessage = errorOf([]byte(ev.Data))
			return
		}
		var part Result
		take(&part, &v)
		text.WriteString(part.Text)
		if part.Finish != "" {
			r.Finish = part.Finish
		}
		if part.CachedReported {
			r.CachedTokens, r.CachedReported = part.CachedTokens, true
		}
	}
}

// take copies a body's text, finish_reason and cached tokens into r.
func take(r *Result, v *body) {
	for _, c := range v.Choices {
		switch {
		case c.Text != nil:
			r.Text += *c.Text
		case c.Message != nil && c.Message.Content != nil:
			r.Text += *c.Message.Content
		case c.Delta != nil && c.Delta.Content != nil:
			r.Text += *c.Delta.Content
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			r.Finish = *c.FinishReason
		}
	}
	if v.Usage != nil && v.Usage.Details != nil && v.Usage.Details.CachedTokens != nil {
		r.CachedTokens, r.CachedReported = *v.Usage.Details.CachedTokens, true
	}
}

func hasError(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "{}" && s != `""`
}

// errorOf reads the code and message of an OpenAI error body,
// {"error": {"message": ..., "code": ...}}, or of a bare error object or
// string. The code may be a string, a number or null.
func errorOf(b []byte) (code, msg string) {
	var outer struct {
		Error json.RawMessage `json:"error"`
	}
	inner := b
	if json.Unmarshal(b, &outer) == nil && hasError(outer.Error) {
		inner = outer.Error
	}
	var s string
	if json.Unmarshal(inner, &s) == nil {
		return "", s
	}
	var obj struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(inner, &obj) != nil {
		return "", ""
	}
	c := strings.TrimSpace(string(obj.Code))
	if json.Unmarshal(obj.Code, &s) == nil {
		c = s
	} else if c == "null" {
		c = ""
	}
	return c, obj.Message
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
