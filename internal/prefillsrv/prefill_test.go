package prefillsrv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

func TestRefusesWithoutPeerAuth(t *testing.T) {
	if _, err := New(config.Default(), nil, Options{}); !errors.Is(err, peerauth.ErrNotConfigured) {
		t.Fatalf("New without peers.auth: %v", err)
	}
}

// TestAdmissionFirst: a prompt over this server's own limit is refused
// with the original error before anything is computed or any connection
// is opened (the decode address is a listener that records connections).
func TestAdmissionFirst(t *testing.T) {
	auth, err := peerauth.NewPSK([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Threads, cfg.MaxInputTokens = 1, 8
	s, err := New(cfg, nil, Options{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer s.threads.Close()
	defer s.Model.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	dialed := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			dialed <- struct{}{}
			c.Close()
		}
	}()
	prompt := make([]int, 9)
	for i := range prompt {
		prompt[i] = 1 + i
	}
	b, _ := json.Marshal(peerapi.PrefillRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: prompt, MaxTokens: 4, DecodeKVAddr: ln.Addr().String()})
	req := httptest.NewRequest("POST", peerapi.PathPrefill, bytes.NewReader(b))
	asPeer(t, auth, req)
	rec := httptest.NewRecorder()
	// The engine loop is not running: only admission may answer. A prompt
	// that got past admission would wait forever, so bound the wait.
	served := make(chan struct{})
	go func() { s.Handler().ServeHTTP(rec, req); close(served) }()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("an over-limit prompt got past admission (the handler is waiting for the engine)")
	}
	var res peerapi.PrefillResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if res.OK || res.Error == nil || res.Error.Code != "context_length_exceeded" || res.BytesSent != 0 {
		t.Fatalf("over-limit prompt: %+v (%+v)", res, res.Error)
	}
	if st := s.Pool.Stats(); st.Allocs != 0 || st.Free != st.Pages {
		t.Errorf("pages touched for a rejected prompt: %+v", st)
	}
	select {
	case <-dialed:
		t.Error("prefill contacted decode for a rejected prompt")
	default:
	}
	// Without the key: 401 before anything.
	req = httptest.NewRequest("POST", peerapi.PathPrefill, bytes.NewReader(b))
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", rec.Code)
	}
}

// TestKVConnectionDuringPrefill: the KV connection to decode is opened
// and authenticated while the prompt is still being computed (here,
// before the engine has even started), and the transfer then uses that
// connection; a request that ends before its transfer closes it.
func TestKVConnectionDuringPrefill(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	auth, err := peerauth.NewPSK(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Threads = 1
	for _, cancelFirst := range []bool{false, true} {
		s, err := New(cfg, nil, Options{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := net.Listen("tcp", "127.0.0.1:0")
		ln := auth.WrapListener(raw, peerauth.RolePrefill)
		conns := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if peerauth.Handshake(context.Background(), c) == nil {
					conns <- c
				}
			}
		}()
		b, _ := json.Marshal(peerapi.PrefillRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: []int{1, 2, 3, 4}, MaxTokens: 4, DecodeKVAddr: raw.Addr().String()})
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest("POST", peerapi.PathPrefill, bytes.NewReader(b)).WithContext(ctx)
		asPeer(t, auth, req)
		rec := httptest.NewRecorder()
		served := make(chan struct{})
		go func() { s.Handler().ServeHTTP(rec, req); close(served) }()

		var c net.Conn
		select {
		case c = <-conns:
		case <-time.After(10 * time.Second):
			t.Fatal("no KV connection while the prompt waits for the engine")
		}
		if cancelFirst {
			cancel()
		}
		engineCtx, stop := context.WithCancel(context.Background())
		engineDone := make(chan error, 1)
		go func() { engineDone <- s.Engine.Run(engineCtx) }()

		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := transfer.ReadFrame(c, transfer.DefaultMaxFrameBytes)
		switch {
		case cancelFirst && err == nil:
			t.Fatalf("a cancelled request sent %v on its KV connection", f.Type)
		case cancelFirst && errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatal("a cancelled request left its KV connection open")
		case !cancelFirst && (err != nil || f.Type != transfer.TypeOpen):
			t.Fatalf("the transfer did not start on the early connection: %v, %v", f, err)
		}
		c.Close() // decode goes away: the transfer, if any, fails
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not end")
		}
		select {
		case extra := <-conns:
			extra.Close()
			t.Error("a second KV connection was opened")
		default:
		}
		cancel()
		stop()
		<-engineDone
		ln.Close()
		s.threads.Close()
		s.Model.Close()
	}
}

// asPeer marks req as arriving over a connection whose peer presented
// auth's own certificate, as a peer holding the same pre-shared key does.
func asPeer(t *testing.T, auth *peerauth.Auth, req *http.Request) {
	t.Helper()
	cert, err := x509.ParseCertificate(auth.ClientTLS().Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
}
