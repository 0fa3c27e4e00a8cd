package peerauth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// deployment makes a CA and one certificate per role, and loads each.
func deployment(t *testing.T) (map[Role]*Auth, map[Role]config.Peers) {
	t.Helper()
	ps, err := MakeCerts(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	as := map[Role]*Auth{}
	for r, p := range ps {
		if as[r], err = Load(p); err != nil {
			t.Fatal(err)
		}
		if as[r].Role() != r {
			t.Fatalf("the %s certificate loads as role %q", r, as[r].Role())
		}
	}
	return as, ps
}

// mtls is one node of a fresh deployment: the router's.
func mtls(t *testing.T) (*Auth, config.Peers) {
	t.Helper()
	as, ps := deployment(t)
	return as[RoleRouter], ps[RoleRouter]
}

func psk(t *testing.T, key string) *Auth {
	t.Helper()
	path := filepath.Join(t.TempDir(), "psk")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Load(config.Peers{Auth: config.PeerAuthPSK, PSKFile: path})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// echo serves one connection of ln: it writes back what it reads, and
// reports the server side's error (nil for a clean exchange).
func echo(ln net.Listener) <-chan error {
	res := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		if err := Handshake(context.Background(), c); err != nil {
			res <- err
			return
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil {
			res <- err
			return
		}
		_, err = c.Write(b)
		res <- err
	}()
	return res
}

// stream dials server's listener as client and checks an echo; it
// returns the dial error and the server's error. As on a KV connection,
// the listener accepts prefill clients and the client wants a decode
// server (psk checks neither).
func stream(t *testing.T, server, client *Auth) (dialErr, serverErr error) {
	t.Helper()
	ln, err := server.Listen("tcp", "127.0.0.1:0", RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	res := echo(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, ln.Addr().String(), RoleDecode)
	if err == nil {
		defer c.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello" {
			// Under TLS 1.3 a client learns of its rejection on first read.
			return err, <-res
		}
	}
	return err, <-res
}

func TestStreamMTLS(t *testing.T) {
	as, _ := deployment(t)
	a, b := as[RoleDecode], as[RolePrefill]
	if d, s := stream(t, a, b); d != nil || s != nil {
		t.Fatalf("same CA refused: dial %v, server %v", d, s)
	}
	others, _ := deployment(t) // another CA
	if d, s := stream(t, a, others[RolePrefill]); d == nil && s == nil {
		t.Fatal("a peer with a certificate from another CA was accepted")
	} else if s == nil {
		t.Errorf("server accepted the foreign client (client saw %v)", d)
	}
	if d, s := stream(t, others[RoleDecode], b); d == nil {
		t.Fatalf("client accepted a server from another CA (server %v)", s)
	}
}

func TestStreamPSK(t *testing.T) {
	key := strings.Repeat("k", 40)
	a, b := psk(t, key), psk(t, key)
	if d, s := stream(t, a, b); d != nil || s != nil {
		t.Fatalf("same key refused: dial %v, server %v", d, s)
	}
	wrong := psk(t, strings.Repeat("x", 40))
	d, s := stream(t, a, wrong)
	if d == nil || s == nil || !errors.Is(d, ErrAuth) || !errors.Is(s, ErrAuth) {
		t.Fatalf("wrong key: dial %v, server %v; want both refused", d, s)
	}
	if !strings.Contains(d.Error(), "does not hold this pre-shared key") {
		t.Errorf("unclear error: %v", d)
	}
	// A peer that connects and never speaks is cut off by the deadline.
	handshakeTimeout = 300 * time.Millisecond
	defer func() { handshakeTimeout = HandshakeTimeout }()
	ln, _ := a.Listen("tcp", "127.0.0.1:0", RolePrefill)
	defer ln.Close()
	res := echo(ln)
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("silent peer passed the handshake")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("silent peer held the handshake past its deadline")
	}
}

func TestShortPSKAndUnset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "psk")
	os.WriteFile(path, []byte("short"), 0o600)
	if _, err := Load(config.Peers{Auth: config.PeerAuthPSK, PSKFile: path}); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
	if _, err := Load(config.Peers{}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("unset auth: %v", err)
	}
	if _, err := Load(config.Peers{Auth: "bogus"}); err == nil {
		t.Error("unknown mode accepted")
	}
}

// httpCall serves a router-only handler on server's control listener and
// calls it as client (with its certificate or, withClient false, none);
// it returns the status (-1: no answer) and the body.
func httpCall(t *testing.T, server, client *Auth, withClient bool) (int, string) {
	t.Helper()
	ln, err := server.ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), RoleRouter)}
	go srv.Serve(ln)
	defer srv.Close()
	hc := client.HTTPClient(RolePrefill, RoleDecode)
	if !withClient {
		// Trust the server but present nothing.
		tr := &http.Transport{TLSClientConfig: client.ClientTLS()}
		if tr.TLSClientConfig != nil {
			tr.TLSClientConfig.Certificates = nil
		}
		hc = &http.Client{Transport: tr}
	}
	resp, err := hc.Get(server.URL(ln.Addr().String(), "/peer/v1/info"))
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func httpStatus(t *testing.T, server, client *Auth, withClient bool) int {
	t.Helper()
	code, _ := httpCall(t, server, client, withClient)
	return code
}

func TestHTTP(t *testing.T) {
	as, _ := deployment(t)
	a, b := as[RoleDecode], as[RoleRouter]
	others, _ := deployment(t)
	if got := httpStatus(t, a, b, true); got != 200 {
		t.Errorf("mtls good peer: %d", got)
	}
	if got := httpStatus(t, a, b, false); got != 401 {
		t.Errorf("mtls without a client certificate: %d, want 401", got)
	}
	if got := httpStatus(t, a, others[RoleRouter], true); got == 200 {
		t.Errorf("mtls peer of another CA: %d", got)
	}
	k := psk(t, strings.Repeat("k", 40))
	if got := httpStatus(t, k, psk(t, strings.Repeat("k", 40)), true); got != 200 {
		t.Errorf("psk good peer: %d", got)
	}
	// A peer with another key fails the handshake itself (each end
	// refuses the other's certificate), so no request is answered.
	if got := httpStatus(t, k, psk(t, strings.Repeat("j", 40)), true); got != -1 {
		t.Errorf("psk wrong key: %d, want the connection refused", got)
	}
	if got := httpStatus(t, k, k, false); got != 401 {
		t.Errorf("psk no key: %d, want 401", got)
	}
	// A request that carries no TLS at all never reaches the handler.
	rec := httptest.NewRecorder()
	k.HTTPHandler(http.NotFoundHandler(), RoleRouter).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 401 {
		t.Errorf("psk without TLS: %d", rec.Code)
	}
}

// TestPSKNeverOnTheWire: under psk, a control call and a stream are TLS:
// someone watching the network sees neither the pre-shared key nor the
// data (the key used to travel as a bearer token in plain HTTP).
func TestPSKNeverOnTheWire(t *testing.T) {
	key := strings.Repeat("s3cr3t-", 6)
	a, b := psk(t, key), psk(t, key)
	var wire bytes.Buffer
	var mu sync.Mutex
	// relay forwards one connection to target and records both ways.
	relay := func(target string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				u, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				cp := func(dst, src net.Conn) {
					buf := make([]byte, 4096)
					for {
						n, err := src.Read(buf)
						if n > 0 {
							mu.Lock()
							wire.Write(buf[:n])
							mu.Unlock()
							dst.Write(buf[:n])
						}
						if err != nil {
							dst.Close()
							return
						}
					}
				}
				go cp(u, c)
				go cp(c, u)
			}
		}()
		return ln.Addr().String()
	}
	// A control call.
	ln, err := a.ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "peer-secret-reply") }), RoleRouter)}
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := b.HTTPClient(RoleDecode).Get(b.URL(relay(ln.Addr().String()), "/peer/v1/info"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "peer-secret-reply" {
		t.Fatalf("control call through the relay: %d %q", resp.StatusCode, body)
	}
	// A stream.
	sl, err := a.Listen("tcp", "127.0.0.1:0", RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	res := echo(sl)
	c, err := b.Dial(context.Background(), relay(sl.Addr().String()), RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("kvkvk"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "kvkvk" {
		t.Fatalf("stream through the relay: %q %v", got, err)
	}
	c.Close()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, secret := range []string{key, "s3cr3t", "peer-secret-reply", "/peer/v1/info", "kvkvk"} {
		if bytes.Contains(wire.Bytes(), []byte(secret)) {
			t.Errorf("%q crossed the wire in the clear", secret)
		}
	}
	if wire.Len() == 0 {
		t.Fatal("the relay saw nothing")
	}
}

// TestIssueNodeFromExistingCA: node certificates issued one per machine
// from one CA (the CA key staying where it was made) authenticate each
// other, carry only the CA certificate next to them, and a CA is never
// silently replaced.
func TestIssueNodeFromExistingCA(t *testing.T) {
	caDir := t.TempDir()
	if err := MakeCA(caDir); err != nil {
		t.Fatal(err)
	}
	load := func(name string, role Role) *Auth {
		t.Helper()
		dir := t.TempDir()
		p, err := IssueNode(caDir, dir, name, role, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the CA key was copied next to node %s: %v", name, err)
		}
		if p.Cert != filepath.Join(dir, name+".pem") || p.Key != filepath.Join(dir, name+"-key.pem") {
			t.Fatalf("node %s files: %+v", name, p)
		}
		a, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	prefill, decode := load("prefill-1", RolePrefill), load("decode-1", RoleDecode)
	if d, s := stream(t, decode, prefill); d != nil || s != nil {
		t.Fatalf("two nodes of one CA refused each other: dial %v, server %v", d, s)
	}
	if err := MakeCA(caDir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("MakeCA over an existing CA: %v", err)
	}
	if _, err := IssueNode(caDir, t.TempDir(), "../escape", RoleRouter, nil); err == nil {
		t.Fatal("a node name with a path was accepted")
	}
	if _, err := IssueNode(t.TempDir(), t.TempDir(), "n", RoleRouter, nil); err == nil || !strings.Contains(err.Error(), "CA certificate") {
		t.Fatalf("issuing without a CA: %v", err)
	}
	other := t.TempDir()
	if err := MakeCA(other); err != nil {
		t.Fatal(err)
	}
	// A key that is not the certificate's CA key is refused.
	b, _ := os.ReadFile(filepath.Join(other, CAKeyFile))
	if err := os.WriteFile(filepath.Join(caDir, CAKeyFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := IssueNode(caDir, t.TempDir(), "n", RoleRouter, nil); err == nil || !strings.Contains(err.Error(), "not the key") {
		t.Fatalf("a mismatched CA key: %v", err)
	}
}
