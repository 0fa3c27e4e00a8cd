package audit

import (
	"bytes"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/loadgen"
)

// maxBody bounds what the audit reads of one response. A completion of a
// few dozen tokens is a few kilobytes; anything near this is reported as
// truncated.
const maxBody = 4 << 20

// HTTPClient is the Client that talks to a real endpoint over net/http. It
// holds the tenants' API keys: each request carries its tenant's key as a
// bearer token, and every key is replaced by "[key of NAME]" (its
// tenant's name) in whatever the server sends back, so that no key can
// reach a report, while a key sent to the wrong tenant still shows as a
// leak (checkCanaries): in the raw body
// here, and again in the decoded Results through Run (it is a Redactor),
// as JSON escapes would hide a key from the first.
type HTTPClient struct {
	// RetryWait is the first wait before GET /v1/models answered 429 or
	// 503 is sent again, as Options.RetryWait is for Run (0: 250ms).
	RetryWait time.Duration

	base    *url.URL
	keys    map[string]string
	secrets []secret // every key, as is and as JSON escapes it
	client  *http.Client
}

// NewHTTPClient returns a client for the endpoint at base (scheme, host
// and any path prefix, without /v1), with each tenant's key. It never
// follows a redirect: a 3xx is answered as it is, so a key only ever goes
// to base's host.
func NewHTTPClient(base *url.URL, keys map[string]string, conns int) *HTTPClient {
	k := make(map[string]string, len(keys))
	var secrets []secret
	for t, v := range keys {
		k[t] = v
		if v == "" {
			continue
		}
		j, _ := json.Marshal(v) // escapes '"', '\', control characters, <, >, &
		esc := string(j[1 : len(j)-1])
		for _, sp := range []string{v, esc, strings.ReplaceAll(esc, "/", `\/`)} {
			secrets = append(secrets, secret{sp, KeyPlaceholder(t)})
		}
	}
	// Longest first, so that no spelling is cut by a shorter one.
	slices.SortFunc(secrets, func(a, b secret) int {
		return cmp.Or(len(b.spelling)-len(a.spelling), strings.Compare(a.spelling, b.spelling))
	})
	secrets = slices.Compact(secrets)
	// bench load's client for a remote target: the proxy from the
	// environment, no compression, and no redirect followed.
	return &HTTPClient{base: base, keys: k, secrets: secrets, client: loadgen.NewClient(true, max(conns, 2))}
}

// Close closes idle connections.
func (h *HTTPClient) Close() { h.client.CloseIdleConnections() }

// Send posts body to ep as tenant and reads the whole response, up to
// maxBody bytes, decoded (see read). It is safe for concurrent use.
func (h *HTTPClient) Send(ctx context.Context, tenant string, ep Endpoint, body []byte) Response {
	u := h.base.JoinPath(strings.Split(strings.TrimPrefix(string(ep), "/"), "/")...).String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Response{Err: h.Redact(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	return h.do(req, tenant, maxBody)
}

// do sends req as tenant and reads the response's body, decoded and
// redacted, up to limit bytes.
func (h *HTTPClient) do(req *http.Request, tenant string, limit int) Response {
	h.authorize(req, tenant)
	resp, err := h.client.Do(req)
	if err != nil {
		return Response{Err: h.Redact(err.Error())}
	}
	defer resp.Body.Close()
	out := Response{Status: resp.StatusCode}
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		out.RetryAfter = time.Duration(min(secs, 3600)) * time.Second
	}
	b, undecodable, err := read(resp.Body, resp.Header.Values("Content-Encoding"), limit)
	// Redacted after decoding: a key inside a compressed body is not
	// there to be found in the bytes as sent.
	out.Body, out.Undecodable = h.redactBytes(b), undecodable
	if len(b) > limit {
		out.Body, out.Truncated = out.Body[:limit], true
	}
	if err != nil {
		out.Err = "reading the body: " + h.Redact(err.Error())
	}
	return out
}

// read reads body, undoing its content codings (the Content-Encoding
// header values, applied in order), up to limit+1 decoded bytes: the
// audit's client asks for no compression, but a server or a proxy may
// compress anyway, and a marker inside compressed bytes would be missed
// by every search. A gzip body without the header is decoded too, found
// by its magic number. A coding the audit cannot undo (br, zstd) leaves
// the body as far as it was decoded and is named in undecodable; a body
// that does not decode is kept as sent, with the error, so that it is
// still searched. The limit applies to the decoded bytes, so that a small
// compressed body cannot expand without bound.
func read(body io.Reader, encodings []string, limit int) (b []byte, undecodable string, err error) {
	b, err = io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return b, "", err
	}
	var codings []string
	for _, v := range encodings {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	sniffed := len(codings) == 0 && len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b
	if sniffed {
		codings = []string{"gzip"}
	}
	cut := len(b) > limit                    // the compressed bytes themselves were cut short
	for i := len(codings) - 1; i >= 0; i-- { // the last coding applied is the first to undo
		var r io.Reader
		var zerr error
		switch codings[i] {
		case "gzip", "x-gzip":
			r, zerr = gzip.NewReader(bytes.NewReader(b))
		case "deflate":
			// HTTP's deflate is zlib-wrapped; some servers send it raw.
			if len(b) >= 2 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 && b[0]&0x0f == 8 {
				r, zerr = zlib.NewReader(bytes.NewReader(b))
			} else {
				r = flate.NewReader(bytes.NewReader(b))
			}
		default:
			return b, strings.Join(codings[:i+1], ", "), nil
		}
		var out []byte
		if zerr == nil {
			out, zerr = io.ReadAll(io.LimitReader(r, int64(limit)+1))
		}
		switch {
		case zerr == nil, cut && errors.Is(zerr, io.ErrUnexpectedEOF):
			b = out
		case sniffed:
			return b, "", nil // gzip's magic number by chance: the body as sent
		default:
			return b, "", fmt.Errorf("decoding its %s coding: %w", codings[i], zerr)
		}
	}
	return b, "", nil
}

// Model is one entry of GET /v1/models.
type Model struct {
	// ID is the model's name, the "model" of a request.
	ID string
	// ContextLen is the context length in tokens the entry reports, 0
	// when it reports none (see contextLenOf).
	ContextLen int
}

// Models lists the model ids GET /v1/models returns to tenant. It is also
// how the command checks every key before the audit starts.
func (h *HTTPClient) Models(ctx context.Context, tenant string) ([]string, error) {
	ms, err := h.ListModels(ctx, tenant)
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids, err
}

// ListModels is Models with each model's context length, where the
// endpoint reports one. A 429 or 503 is asked again, as Run does for every
// other request: a rate limit at the start is not a refused key.
func (h *HTTPClient) ListModels(ctx context.Context, tenant string) ([]Model, error) {
	u := h.base.JoinPath("v1", "models").String()
	var resp Response
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp = h.do(req, tenant, 1<<20)
		wait := h.RetryWait
		if wait <= 0 {
			wait = defaultRetryWait
		}
		if !busy(&resp) || try == maxTries || !sleep(ctx, retryWait(wait, try, resp.RetryAfter)) {
			break
		}
	}
	b := resp.Body
	switch {
	case resp.Status == 0:
		return nil, fmt.Errorf("tenant %q: GET %s: %s", tenant, u, resp.Err)
	case resp.Err != "":
		return nil, fmt.Errorf("tenant %q: GET %s: %s", tenant, u, resp.Err)
	case resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden:
		_, _, msg := errorOf(b)
		return nil, fmt.Errorf("the endpoint refused tenant %q's API key: GET %s answered %d %s: %s; check --key %s=...",
			tenant, u, resp.Status, http.StatusText(resp.Status), clip(h.Redact(msg), 200), tenant) // decoded: redact again
	case resp.Status != http.StatusOK:
		return nil, fmt.Errorf("tenant %q: GET %s answered %d %s: %s", tenant, u, resp.Status, http.StatusText(resp.Status), clip(string(bytes.TrimSpace(b)), 200))
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("tenant %q: GET %s: not a model list: %v", tenant, u, err)
	}
	var out []Model
	for _, d := range list.Data {
		if id, _ := d["id"].(string); id != "" {
			out = append(out, Model{ID: id, ContextLen: contextLenOf(d)})
		}
	}
	return out, nil
}

// contextLenOf reads the context length a model list entry reports, under
// the names servers use: vLLM's and SGLang's max_model_len, the
// context_length, context_window or max_context_length of others, and
// llama.cpp's meta.n_ctx_train (the training context: at least what the
// server runs, so a prompt one token longer is still over its limit).
func contextLenOf(d map[string]any) int {
	num := func(v any) int {
		if f, ok := v.(float64); ok && f >= 1 && f < 1<<40 && f == float64(int64(f)) {
			return int(f)
		}
		return 0
	}
	for _, k := range []string{"max_model_len", "context_length", "context_window", "max_context_length"} {
		if n := num(d[k]); n > 0 {
			return n
		}
	}
	if meta, ok := d["meta"].(map[string]any); ok {
		for _, k := range []string{"n_ctx", "n_ctx_train"} {
			if n := num(meta[k]); n > 0 {
				return n
			}
		}
	}
	return 0
}

func (h *HTTPClient) authorize(req *http.Request, tenant string) {
	if k := h.keys[tenant]; k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
}

// secret is one spelling of a tenant's key and what stands for it.
type secret struct{ spelling, placeholder string }

// KeyPlaceholder is what stands for tenant's API key in everything the
// audit keeps of a response.
func KeyPlaceholder(tenant string) string { return "[key of " + tenant + "]" }

// Redact replaces every key in s, as is or JSON-escaped, by its
// KeyPlaceholder. Send does so on the raw body; Run calls it again on the
// decoded Results (Redactor).
func (h *HTTPClient) Redact(s string) string {
	for _, k := range h.secrets {
		s = strings.ReplaceAll(s, k.spelling, k.placeholder)
	}
	return s
}

func (h *HTTPClient) redactBytes(b []byte) []byte {
	for _, k := range h.secrets {
		if bytes.Contains(b, []byte(k.spelling)) {
			b = bytes.ReplaceAll(b, []byte(k.spelling), []byte(k.placeholder))
		}
	}
	return b
}
