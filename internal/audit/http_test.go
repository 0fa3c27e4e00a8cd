package audit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
	if resp.Status != 200 || strings.Contains(string(resp.Body), "secret") || !strings.Contains(string(resp.Body), "[key]") {
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
