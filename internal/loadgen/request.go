package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrorClass says why a request counted as failed.
type ErrorClass int

const (
	// OK is a request that succeeded: status 200, a stream that ended in
	// [DONE], and a finish_reason on the way.
	OK ErrorClass = iota
	// HTTPStatus is a response whose status was not 200.
	HTTPStatus
	// StreamError is a stream that reported an error: an "error" event, a
	// chunk with an "error" member, a finish_reason of "error" or
	// "abort", or a chunk that is not valid JSON.
	StreamError
	// Truncated is a stream that ended without [DONE] (the connection
	// dropped or closed early) or ended without any finish_reason.
	Truncated
	// Timeout is a request that ran past its own deadline.
	Timeout
	// Transport is a request that got no response at all: connection
	// refused or reset before the status line.
	Transport
)

var classNames = [...]string{"ok", "http_status", "stream_error", "truncated", "timeout", "transport"}

func (c ErrorClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// result is the outcome of one request.
type result struct {
	class  ErrorClass
	status int    // HTTP status, 0 when none arrived
	msg    string // what went wrong, for failed requests
	finish string // the last non-empty finish_reason

	ttft time.Duration // to the first chunk with content; 0 when none came
	e2e  time.Duration
	gaps []time.Duration // between successive chunks with content

	chunks           int // chunks with content
	usage            bool
	promptTokens     int
	completionTokens int
}

func (r *result) fail(c ErrorClass, format string, args ...any) {
	r.class, r.msg = c, fmt.Sprintf(format, args...)
}

// chunk is the part of a streamed completion or chat-completion chunk
// that the checks and timings need.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// maxEventBytes bounds one SSE line or event; a chunk is a few hundred
// bytes, so anything near this is a broken server.
const maxEventBytes = 1 << 20

// streamLimits bound what one stream may send, so that a server that
// floods (content past max_tokens, or a body that never ends) fails that
// request at once rather than growing the client's memory (a gap is kept
// per content chunk) and holding a worker until the deadline.
type streamLimits struct {
	// chunks bounds the chunks with content. A server sends at most one
	// per token, and a stream asked for max_tokens tokens; the slack is
	// for servers that split a token's text (a role chunk has none).
	chunks int
	// bytes bounds the whole body: a chunk is a few hundred bytes, so
	// 16 KiB a token and an event's worth more only a broken server uses.
	bytes int64
}

func limitsFor(maxTokens int) streamLimits {
	return streamLimits{chunks: 2*maxTokens + 16, bytes: int64(maxTokens)*(16<<10) + maxEventBytes + 64<<10}
}

// errBodyTooLong is returned by cappedReader past its limit.
var errBodyTooLong = errors.New("body longer than the limit")

// cappedReader fails with errBodyTooLong once left bytes have been read.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errBodyTooLong
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// maxFinishBytes bounds a kept finish_reason ("stop", "length"...): it
// is kept per request and counted per value in the report.
const maxFinishBytes = 64

// do sends one streaming request and reads the stream to its end, timing
// every chunk as it arrives, and fails it past lim. ctx carries the
// request's own deadline.
func do(ctx context.Context, client *http.Client, url, apiKey string, body []byte, lim streamLimits) (r result) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		r.fail(Transport, "%v", err)
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	start := time.Now()
	defer func() {
		if r.e2e == 0 {
			r.e2e = time.Since(start)
		}
	}()
	timedOut := func() bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) }

	resp, err := client.Do(req)
	if err != nil {
		if timedOut() {
			r.fail(Timeout, "no response before the deadline")
		} else {
			r.fail(Transport, "%v", err)
		}
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		r.fail(HTTPStatus, "http %d: %s", resp.StatusCode, snippet(b))
		return r
	}

	sr := NewSSEReader(&cappedReader{r: resp.Body, left: lim.bytes}, maxEventBytes)
	var last time.Time
	for {
		ev, err := sr.Next()
		now := time.Now()
		switch {
		case err == nil:
		case timedOut():
			r.fail(Timeout, "deadline passed mid-stream after %d chunks", r.chunks)
			return r
		case errors.Is(err, ErrLineTooLong):
			r.fail(StreamError, "%v", err)
			return r
		case errors.Is(err, errBodyTooLong):
			r.fail(StreamError, "stream sent more than %d bytes (%d chunks with content) without ending: far more than max_tokens needs", lim.bytes, r.chunks)
			return r
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			r.fail(Truncated, "stream ended without [DONE] after %d chunks", r.chunks)
			return r
		default:
			r.fail(Truncated, "stream broke after %d chunks: %v", r.chunks, err)
			return r
		}
		if ev.Name == "error" {
			r.fail(StreamError, "error event: %s", snippet([]byte(ev.Data)))
			return r
		}
		if ev.Data == "[DONE]" {
			r.e2e = now.Sub(start)
			drain(resp.Body)
			break
		}
		var c chunk
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			r.fail(StreamError, "chunk is not JSON (%v): %s", err, snippet([]byte(ev.Data)))
			return r
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			r.fail(StreamError, "error in stream: %s", errorMessage(c.Error))
			return r
		}
		content := false
		for _, ch := range c.Choices {
			if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" {
				content = true
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				r.finish = *ch.FinishReason
				if len(r.finish) > maxFinishBytes {
					r.finish = strings.ToValidUTF8(r.finish[:maxFinishBytes], "") + "…"
				}
			}
		}
		if content {
			if r.chunks >= lim.chunks {
				r.fail(StreamError, "stream sent more than %d chunks with content: more than max_tokens allows", lim.chunks)
				return r
			}
			if r.chunks == 0 {
				r.ttft = now.Sub(start)
			} else {
				r.gaps = append(r.gaps, now.Sub(last))
			}
			last = now
			r.chunks++
		}
		if c.Usage != nil {
			r.usage = true
			r.promptTokens, r.completionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
	}
	switch r.finish {
	case "":
		r.fail(Truncated, "stream reached [DONE] without a finish_reason after %d chunks", r.chunks)
	case "error", "abort":
		r.fail(StreamError, "finish_reason %q", r.finish)
	}
	return r
}

// errorMessage extracts the message from an OpenAI-style error member,
// which is usually {"message": ...} but sometimes a bare string.
func errorMessage(raw json.RawMessage) string {
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return snippet([]byte(obj.Message))
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return snippet([]byte(s))
	}
	return snippet(raw)
}

// drain reads what is left of a body after [DONE], usually just the end
// of the chunked encoding, so the connection can be reused by the next
// request instead of being closed. A server that keeps the stream open
// after [DONE] gets a short grace period, then the body is closed.
func drain(body io.ReadCloser) {
	t := time.AfterFunc(100*time.Millisecond, func() { body.Close() })
	defer t.Stop()
	io.Copy(io.Discard, io.LimitReader(body, 64<<10))
}
