package decodesrv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// syncBuffer is a log sink the servers' goroutines may write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// call sends a control request with client and returns the status and
// body.
func call(t *testing.T, client *http.Client, method, url string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noCertClient trusts the deployment's CA but presents no certificate,
// as a load balancer's probe or a plain Prometheus would.
func (p *pair) noCertClient() *http.Client {
	cfg := p.auths[peerauth.RoleRouter].ClientTLS()
	cfg.Certificates = nil
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
}

// TestControlEndpointsAcceptOnlyTheRouter: a prefill server's certificate,
// signed by the same CA, can neither reserve (generate), cancel nor read
// info on a decode server, nor prefill on another prefill server: 403
// naming the role it presented and the one required, and nothing is
// reserved. The router's certificate does all of it (the other tests).
func TestControlEndpointsAcceptOnlyTheRouter(t *testing.T) {
	p := startPair(t, setup{})
	as := p.auths[peerauth.RolePrefill].HTTPClient(peerauth.RolePrefill, peerauth.RoleDecode)
	id := transfer.NewID().String()
	for _, c := range []struct {
		method, url string
		body        any
	}{
		{"POST", p.decURL + peerapi.PathGenerate, peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: encode("Once upon a time"), MaxTokens: 4}},
		{"POST", p.decURL + peerapi.PathCancel, peerapi.CancelRequest{ID: id}},
		{"GET", p.decURL + peerapi.PathInfo, nil},
		{"POST", p.preURL + peerapi.PathPrefill, peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: encode("Once upon a time"), MaxTokens: 4, DecodeKVAddr: p.kvAddr}},
	} {
		code, body := call(t, as, c.method, c.url, c.body)
		path := c.url[strings.LastIndex(c.url, "/peer/"):]
		if code != http.StatusForbidden || !strings.Contains(body, "presented a certificate with role prefill") ||
			!strings.Contains(body, path+" needs a certificate with role router") || !strings.Contains(body, "peer_role_forbidden") {
			t.Errorf("%s %s with a prefill certificate: %d %s; want 403 naming both roles", c.method, path, code, body)
		}
	}
	if n := p.dec.Info().Load.Transfers; n != 0 {
		t.Fatalf("a prefill certificate left %d reservations on decode", n)
	}
	p.idle()
}

// TestKVListenerAcceptsOnlyPrefill: the router's certificate (the same CA)
// cannot open a KV stream to decode as if it were a prefill server: the
// handshake fails, the connection closes, the refusal is counted and
// logged naming the role presented and the one required, and a frame
// sent anyway reaches nothing.
func TestKVListenerAcceptsOnlyPrefill(t *testing.T) {
	var log syncBuffer
	p := startPair(t, setup{decLog: &log})
	g, id, _ := p.openStream(encode("Once upon a time there was"))
	nc, err := p.auths[peerauth.RoleRouter].Dial(context.Background(), p.kvAddr, peerauth.RoleDecode)
	if err == nil {
		// TLS 1.3: the client finishes first and hears the refusal on
		// its first read.
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		c := transfer.NewTCPConn(nc, transfer.TCPOptions{})
		transfer.Send(c, &transfer.Frame{Type: transfer.TypeAbort, ID: id, Code: "x", Reason: "from the router's certificate"}, transfer.DefaultMaxFrameBytes)
		if f, err := c.Read(); err == nil {
			t.Fatalf("decode answered a router-role KV connection with %v", f.Type)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.metric(p.decURL, "bulkhead_peer_auth_failures_total") != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("decode counted %q KV authentication failures, want 1", p.metric(p.decURL, "bulkhead_peer_auth_failures_total"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := log.String(); !strings.Contains(l, "kv connection refused") || !strings.Contains(l, "presented a certificate with role router") ||
		!strings.Contains(l, "needs a certificate with role prefill") {
		t.Errorf("decode's log does not say which role was refused and which was needed:\n%s", l)
	}
	if n := p.dec.Info().Load.Transfers; n != 1 {
		t.Fatalf("the open transfer is gone (%d live) after a refused connection", n)
	}
	p.cancel(p.decURL, id.String())
	g.rest()
	p.idle()
}

// TestRouterFramesRefusedOnKVConnections: a CANCEL is the router's, and
// arrives at decode over its control requests; on a prefill's KV
// connection it used to reach the transfer table as if the router had
// sent it, so any prefill that learnt a transfer id could cancel another
// tenant's transfer, even one bound to another prefill's connection.
// Decode now refuses every frame type a prefill does not send (anything
// but OPEN, DATA, COMMIT and ABORT): it aborts that connection, naming
// the violation, counts it, and the other transfer goes on.
func TestRouterFramesRefusedOnKVConnections(t *testing.T) {
	for _, typ := range []transfer.Type{transfer.TypeCancel, transfer.TypeReserve, transfer.TypeAck} {
		t.Run(typ.String(), func(t *testing.T) {
			p := startPair(t, setup{})
			g, id, victim := p.openStream(encode("Once upon a time there was"))
			attacker := p.kvClient()
			f := &transfer.Frame{Type: typ, ID: id, Tenant: "acme", Tokens: 1, MaxNew: 1}
			if err := transfer.Send(attacker, f, transfer.DefaultMaxFrameBytes); err != nil {
				t.Fatal(err)
			}
			got, err := attacker.Read()
			if err != nil || got.Type != transfer.TypeAbort || !got.ID.IsZero() || got.Code != transfer.CodeProtocol ||
				!strings.Contains(got.Reason, typ.String()) || !strings.Contains(got.Reason, "only OPEN, DATA, COMMIT and ABORT") {
				t.Fatalf("after a %v on a prefill connection decode sent %+v (%v); want the connection's ABORT (zero id, %s) naming it", typ, got, err, transfer.CodeProtocol)
			}
			if _, err := attacker.Read(); err == nil {
				t.Fatalf("decode kept a connection open after a %v on it", typ)
			}
			if v := p.metric(p.decURL, `bulkhead_kv_frames_refused_total{type="`+typ.String()+`"}`); v != "1" {
				t.Errorf("decode counted %q refused %v frames, want 1", v, typ)
			}
			// The victim's transfer is untouched: still live, nothing
			// sent to its connection, its generate stream still waiting.
			if n := p.dec.Info().Load.Transfers; n != 1 {
				t.Fatalf("%d transfers live after the refused %v, want the victim's", n, typ)
			}
			victim.Close() // its prefill goes away: now the transfer fails, as peer lost
			_, last, err := g.rest()
			if err != nil || last.Type != peerapi.EventError || last.Error.Code != transfer.CodePeerLost {
				t.Fatalf("the victim's generate ended with %+v (%+v, %v); want its own connection's loss, not a cancel", last, last.Error, err)
			}
			p.idle()
		})
	}
}

// TestControlMetricsNeedPeerAuth: /metrics names every tenant's traffic,
// so on a control listener it needs a peer certificate (401 without), on
// decode's the router's; /health and /ready stay open for probes and say
// nothing about tenants.
func TestControlMetricsNeedPeerAuth(t *testing.T) {
	p := startPair(t, setup{})
	toks, last, pr := p.run(encode("Once upon a time"), 4, peerapi.Sampling{})
	if !pr.OK || last.Type != peerapi.EventDone || len(toks) == 0 {
		t.Fatalf("a request: %+v %+v %v", pr, last, toks)
	}
	anon := p.noCertClient()
	for _, base := range []string{p.decURL, p.preURL} {
		code, body := call(t, anon, "GET", base+"/metrics", nil)
		if code != http.StatusUnauthorized || strings.Contains(body, "acme") {
			t.Errorf("GET %s/metrics without a certificate: %d %.100q; want 401 naming no tenant", base, code, body)
		}
		for path, want := range map[string]string{"/health": "ok\n", "/ready": "ready\n"} {
			if code, body := call(t, anon, "GET", base+path, nil); code != 200 || body != want {
				t.Errorf("GET %s%s without a certificate: %d %q; want 200 %q", base, path, code, body, want)
			}
		}
		// The router's certificate may scrape.
		if code, body := call(t, p.client, "GET", base+"/metrics", nil); code != 200 || !strings.Contains(body, "bulkhead_kv_pages") {
			t.Errorf("GET %s/metrics with a peer certificate: %d %.100q", base, code, body)
		}
	}
	// Not a prefill's, on decode: its metrics count the frames the KV
	// listener refused as another prefill's (kv_wrong_sender_total), which
	// would tell a rogue prefill what the wire does not: that an id it
	// holds is reserved for another.
	asPrefill := p.auths[peerauth.RolePrefill].HTTPClient(peerauth.RoleDecode)
	if code, body := call(t, asPrefill, "GET", p.decURL+"/metrics", nil); code != http.StatusForbidden || strings.Contains(body, "wrong_sender") {
		t.Errorf("GET decode's /metrics with a prefill's certificate: %d %.100q; want 403", code, body)
	}
}
