package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// TestDisaggPeerRoles: with certificates made by `bulkhead certs --role`
// from one CA, a real decode process refuses a prefill server's
// certificate at its reserve endpoint (403 naming both roles, nothing
// reserved) and the router's certificate at its KV listener (the
// connection closes; its log names both roles); its control port serves
// /metrics only to a peer certificate, while --metrics-listen serves the
// operator's scraper and /health stays open for probes.
func TestDisaggPeerRoles(t *testing.T) {
	dir := t.TempDir()
	issue := func(role, name string, extra ...string) config.Peers {
		t.Helper()
		out := filepath.Join(dir, name)
		args := append([]string{"certs", "--out", out, "--role", role, "--name", name}, extra...)
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("certs %v: exit %d: %s", args, code, stderr.String())
		}
		return config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(out, peerauth.CAFile), Cert: filepath.Join(out, name+".pem"), Key: filepath.Join(out, name+"-key.pem")}
	}
	routerPeers := issue("router", "router")
	caDir := filepath.Dir(routerPeers.CA)
	prefillPeers := issue("prefill", "prefill-1", "--ca", caDir)
	decodePeers := issue("decode", "decode-1", "--ca", caDir)
	load := func(p config.Peers) *peerauth.Auth {
		a, err := peerauth.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	routerAuth, prefillAuth := load(routerPeers), load(prefillPeers)

	d := startRole(t, "decode", roleConfig(t, 200, 64, 10, "", decodePeers))
	generate := func(client *http.Client) (int, string) {
		b, _ := json.Marshal(peerapi.GenerateRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: []int{1, 2, 3}, MaxTokens: 2})
		resp, err := client.Post("https://"+d.control+peerapi.PathGenerate, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	allocs := d.metric(t, "bulkhead_kv_page_allocations_total")
	code, body := generate(prefillAuth.HTTPClient(peerauth.RoleDecode))
	if code != http.StatusForbidden || !strings.Contains(body, "presented a certificate with role prefill") || !strings.Contains(body, "needs a certificate with role router") {
		t.Fatalf("reserve with a prefill certificate: %d %s; want 403 naming both roles", code, body)
	}
	if a := d.metric(t, "bulkhead_kv_page_allocations_total"); a != allocs || d.metric(t, "bulkhead_kv_reservations") != 0 {
		t.Fatalf("decode reserved for a prefill certificate (%v page allocations)", a-allocs)
	}
	// The router's certificate still reserves (and the reservation then
	// times out or is dropped with the connection: nothing follows it).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "POST", "https://"+d.control+peerapi.PathGenerate,
		strings.NewReader(`{"id":"`+transfer.NewID().String()+`","tenant":"acme","prompt":[1,2,3],"max_tokens":2}`))
	resp, err := routerAuth.HTTPClient(peerauth.RoleDecode).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ev peerapi.Event
	if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil || resp.StatusCode != 200 || ev.Type != peerapi.EventReserved {
		t.Fatalf("reserve with the router's certificate: %d %+v %v", resp.StatusCode, ev, err)
	}
	resp.Body.Close()
	cancel()

	// The router's certificate on the KV listener.
	nc, err := routerAuth.Dial(context.Background(), d.kv, peerauth.RoleDecode)
	if err == nil {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatalf("decode's KV listener answered %d bytes to the router's certificate", n)
		}
		nc.Close()
	}
	d.waitMetric(t, 1, "bulkhead_peer_auth_failures_total")
	d.waitLog(t, "decode's log does not say which role its KV listener refused and which it needs",
		"kv connection refused", "presented a certificate with role router", "needs a certificate with role prefill")

	// /metrics: not on the control port without a peer certificate; the
	// metrics listener (startRole's --metrics-listen) serves it, and
	// /health and /ready stay open.
	resp, err = anonClient.Get("https://" + d.control + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "bulkhead_kv") {
		t.Fatalf("/metrics on the control port without a certificate: %d %.100q; want 401", resp.StatusCode, b)
	}
	for _, path := range []string{"/health", "/ready"} {
		resp, err := anonClient.Get("https://" + d.control + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s on the control port without a certificate: %d", path, resp.StatusCode)
		}
	}
	if d.metric(t, "bulkhead_kv_pool_pages") == 0 {
		t.Fatal("the metrics listener serves no pool metrics")
	}
}
