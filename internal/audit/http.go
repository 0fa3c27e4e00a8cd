package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
// maxBody bytes. It is safe for concurrent use.
func (h *HTTPClient) Send(ctx context.Context, tenant string, ep Endpoint, body []byte) Response {
	u := h.base.JoinPath(strings.Split(strings.TrimPrefix(string(ep), "/"), "/")...).String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Response{Err: h.Redact(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	h.authorize(req, tenant)
	resp, err := h.client.Do(req)
	if err != nil {
		return Response{Err: h.Redact(err.Error())}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	out := Response{Status: resp.StatusCode, Body: h.redactBytes(b)}
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		out.RetryAfter = time.Duration(min(secs, 3600)) * time.Second
	}
	if len(b) > maxBody {
		out.Body, out.Truncated = out.Body[:maxBody], true
	}
	if err != nil {
		out.Err = "reading the body: " + h.Redact(err.Error())
	}
	return out
}

// Models lists the model ids GET /v1/models returns to tenant. It is also
// how the command checks every key before the audit starts.
func (h *HTTPClient) Models(ctx context.Context, tenant string) ([]string, error) {
	u := h.base.JoinPath("v1", "models").String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	h.authorize(req, tenant)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: GET %s: %s", tenant, u, h.Redact(err.Error()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("tenant %q: GET %s: reading the body: %s", tenant, u, h.Redact(err.Error()))
	}
	b = h.redactBytes(b)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		_, msg := errorOf(b)
		return nil, fmt.Errorf("the endpoint refused tenant %q's API key: GET %s answered %s: %s; check --key %s=...",
			tenant, u, resp.Status, clip(h.Redact(msg), 200), tenant) // decoded: redact again
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tenant %q: GET %s answered %s: %s", tenant, u, resp.Status, clip(string(bytes.TrimSpace(b)), 200))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("tenant %q: GET %s: not a model list: %v", tenant, u, err)
	}
	var ids []string
	for _, d := range list.Data {
		if d.ID != "" {
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
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
