package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestHTTPClient: the edge sends each tenant's key to the right path,
// removes keys from what comes back, never follows a redirect, and says
// which tenant's key a server refused, without the key.
func TestHTTPClient(t *testing.T) {
	keys := map[string]string{"acme": "sk-acme-secret-1", "globex": "sk-globex-secret-2"}
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case strings.HasSuffix(r.URL.Path, "/redirect/v1/completions"):
			http.Redirect(w, r, "http://example.invalid/steal", http.StatusFound)
		case auth != keys["acme"]:
			w.WriteHeader(401)
			w.Write([]byte(`{"error":{"message":"unknown key ` + auth + `","code":"invalid_api_key"}}`))
		case strings.HasSuffix(r.URL.Path, "/v1/models"):
			w.Write([]byte(`{"object":"list","data":[{"id":"tiny"},{"id":"big"}]}`))
		default:
			// A careless server that echoes the caller's key.
			w.Write([]byte(`{"choices":[{"text":"your key is ` + auth + `","finish_reason":"length"}]}`))
		}
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/prefix")
	c := NewHTTPClient(base, keys, 2)
	defer c.Close()
	ctx := context.Background()

	models, err := c.Models(ctx, "acme")
	if err != nil || strings.Join(models, ",") != "tiny,big" {
		t.Fatalf("models %v, %v", models, err)
	}
	_, err = c.Models(ctx, "globex")
	if err == nil || !strings.Contains(err.Error(), `refused tenant "globex"'s API key`) || !strings.Contains(err.Error(), "401") ||
		strings.Contains(err.Error(), "secret") {
		t.Fatalf("refused key: %v", err)
	}
	resp := c.Send(ctx, "acme", Completions, []byte(`{}`))
	if resp.Status != 200 || strings.Contains(string(resp.Body), "secret") || !strings.Contains(string(resp.Body), "[key of acme]") {
		t.Fatalf("echoed key not redacted: %d %s", resp.Status, resp.Body)
	}
	resp = c.Send(ctx, "acme", Chat, []byte(`{}`))
	if resp.Status != 200 {
		t.Fatalf("chat: %d %s", resp.Status, resp.Body)
	}
	rbase, _ := url.Parse(srv.URL + "/redirect")
	r := NewHTTPClient(rbase, keys, 1)
	defer r.Close()
	if resp := r.Send(ctx, "acme", Completions, []byte(`{}`)); resp.Status != http.StatusFound {
		t.Fatalf("redirect followed: %d %s %s", resp.Status, resp.Body, resp.Err)
	}
	want := []string{"GET /prefix/v1/models", "GET /prefix/v1/models", "POST /prefix/v1/completions", "POST /prefix/v1/chat/completions", "POST /redirect/v1/completions"}
	if strings.Join(paths, "|") != strings.Join(want, "|") {
		t.Errorf("paths %v, want %v", paths, want)
	}
}

// TestHTTPClientRetryAfter: a busy answer's Retry-After, in seconds,
// reaches Run; a date or nonsense is no wait.
func TestHTTPClientRetryAfter(t *testing.T) {
	for _, c := range []struct {
		header string
		want   time.Duration
	}{{"2", 2 * time.Second}, {"", 0}, {"soon", 0}, {"Wed, 21 Oct 2015 07:28:00 GMT", 0}, {"-3", 0}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.header != "" {
				w.Header().Set("Retry-After", c.header)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		base, _ := url.Parse(srv.URL)
		h := NewHTTPClient(base, map[string]string{"a": "sk-key-of-a"}, 1)
		if resp := h.Send(context.Background(), "a", Completions, []byte(`{}`)); resp.Status != 429 || resp.RetryAfter != c.want {
			t.Errorf("Retry-After %q: status %d, wait %v; want 429, %v", c.header, resp.Status, resp.RetryAfter, c.want)
		}
		h.Close()
		srv.Close()
	}
}

// TestEscapedKeyNeverReported: a server that echoes the caller's key JSON
// escaped ("\/" for "/", or "\u" escapes) still gets no key into the
// results or the report: the escape hides it from the raw body, not from
// the decoded text.
func TestEscapedKeyNeverReported(t *testing.T) {
	keys := map[string]string{"acme": "sk-acme/0123456789+ab", "globex": "sk-globex/0123456789+cd", "hooli": "sk-hooli/0123456789+ef"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		slashed := strings.ReplaceAll(auth, "/", `\/`)
		if strings.HasSuffix(r.URL.Path, "/models") {
			w.WriteHeader(401)
			w.Write([]byte(`{"error":{"message":"unknown key ` + slashed + `","code":"invalid_api_key"}}`))
			return
		}
		w.Write([]byte(`{"choices":[{"text":"key ` + slashed + ` or ` + escaped(auth) + `","finish_reason":"length"}]}`))
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	c := NewHTTPClient(base, keys, 4)
	defer c.Close()
	if _, err := c.Models(context.Background(), "acme"); err == nil || strings.Contains(err.Error(), keys["acme"]) || !strings.Contains(err.Error(), "[key of acme]") {
		t.Errorf("refused key: %v", err)
	}
	p, _ := NewPlan(testConfig())
	res, err := Run(context.Background(), p, c, Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	rep := Evaluate(p, res)
	var b strings.Builder
	WriteText(&b, &rep)
	j, _ := json.Marshal(&rep)
	all := fmt.Sprintf("%+v\n%s\n%s", res, b.String(), j)
	for _, k := range keys {
		if strings.Contains(all, k) {
			t.Fatalf("a key reached the results or the report: %s", k)
		}
	}
	// Raw text, never decoded, in its escaped spellings too.
	raw := c.Send(context.Background(), "acme", Completions, []byte(`{}`))
	for _, k := range keys {
		for _, spelling := range []string{k, strings.ReplaceAll(k, "/", `\/`)} {
			if strings.Contains(string(raw.Body), spelling) {
				t.Errorf("the raw body holds %s", spelling)
			}
		}
	}
	if !strings.Contains(res[0].Text, "[key of acme]") {
		t.Errorf("text %q; want the key replaced by [key of acme]", res[0].Text)
	}
}
