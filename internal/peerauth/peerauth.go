package peerauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// ErrNotConfigured is returned by Load when peers.auth is not set.
var ErrNotConfigured = errors.New("peers.auth is not set: prefill and decode servers need mutual TLS or a pre-shared key")

// ErrAuth is wrapped by every handshake or credential failure.
var ErrAuth = errors.New("peer authentication failed")

// MinPSKBytes is the shortest pre-shared key accepted.
const MinPSKBytes = 32

// HandshakeTimeout bounds a connection's authentication handshake, so a
// peer that connects and says nothing cannot hold a goroutine for long.
const HandshakeTimeout = 5 * time.Second

// handshakeTimeout is HandshakeTimeout; tests shorten it.
var handshakeTimeout = HandshakeTimeout

// Auth is a loaded set of peer credentials. It is immutable and safe for
// concurrent use.
type Auth struct {
	mode string
	// Both modes are TLS 1.3; they differ in how a peer's certificate is
	// judged (signed by the CA, or carrying the pre-shared key's public
	// key: psk.go).
	serverTLS, controlTLS, clientTLS *tls.Config
}

// Load reads the credentials cfg names. A zero Auth field is refused
// (ErrNotConfigured): a role must never run unauthenticated.
func Load(cfg config.Peers) (*Auth, error) {
	mode := cfg.Auth
	if mode == "" && cfg.CA != "" {
		mode = config.PeerAuthMTLS
	}
	switch mode {
	case "":
		return nil, ErrNotConfigured
	case config.PeerAuthMTLS:
		return loadMTLS(cfg)
	case config.PeerAuthPSK:
		if cfg.PSKFile == "" {
			return nil, fmt.Errorf("peers.auth is psk but peers.psk_file is not set")
		}
		if err := checkPrivate("peers.psk_file", cfg.PSKFile); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(cfg.PSKFile)
		if err != nil {
			return nil, fmt.Errorf("peers.psk_file: %w", err)
		}
		return NewPSK(bytes.TrimSpace(b))
	}
	return nil, fmt.Errorf("peers.auth is %q; want %s or %s", mode, config.PeerAuthMTLS, config.PeerAuthPSK)
}

// NewPSK returns a psk-mode Auth for key (at least MinPSKBytes bytes).
func NewPSK(key []byte) (*Auth, error) {
	if len(key) < MinPSKBytes {
		return nil, fmt.Errorf("peers.psk_file: the pre-shared key is %d bytes, at least %d are needed", len(key), MinPSKBytes)
	}
	return newPSK(key)
}

func loadMTLS(cfg config.Peers) (*Auth, error) {
	if cfg.CA == "" || cfg.Cert == "" || cfg.Key == "" {
		return nil, fmt.Errorf("peers.auth is mtls but peers.ca, peers.cert and peers.key are not all set")
	}
	caPEM, err := os.ReadFile(cfg.CA)
	if err != nil {
		return nil, fmt.Errorf("peers.ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("peers.ca %s: no PEM certificate in it", cfg.CA)
	}
	cert, err := loadKeyPair(cfg.Cert, cfg.Key, cfg.CA, roots, time.Now())
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	server := base.Clone()
	server.ClientCAs = roots
	server.ClientAuth = tls.RequireAndVerifyClientCert
	// The control listener verifies a client certificate when one is
	// given and leaves the decision to HTTPHandler, so that /health and
	// /metrics can be scraped without one; peer paths still require it.
	control := server.Clone()
	control.ClientAuth = tls.VerifyClientCertIfGiven
	client := base.Clone()
	client.RootCAs = roots
	return &Auth{mode: config.PeerAuthMTLS, serverTLS: server, controlTLS: control, clientTLS: client}, nil
}

// Mode is config.PeerAuthMTLS or config.PeerAuthPSK.
func (a *Auth) Mode() string { return a.mode }

// Scheme is the URL scheme of control requests: "https" in both modes.
func (a *Auth) Scheme() string { return "https" }

// URL is the control URL of path on the peer at addr (host:port).
func (a *Auth) URL(addr, path string) string { return a.Scheme() + "://" + addr + path }

// ServerTLS is the TLS configuration of a stream listener: it requires a
// client certificate signed by the CA, or carrying the pre-shared key's
// public key.
func (a *Auth) ServerTLS() *tls.Config { return a.serverTLS.Clone() }

// ClientTLS presents this node's certificate and verifies the server's
// (against the CA, or the pre-shared key's public key).
func (a *Auth) ClientTLS() *tls.Config { return a.clientTLS.Clone() }

// Listen returns a stream listener (the KV transfer endpoint) whose
// connections authenticate the peer before their first byte of data: TLS
// with a required client certificate. The handshake runs on the
// connection's first Read or Write, or explicitly with Handshake, never
// inside Accept, so one silent peer cannot stall the accept loop.
func (a *Auth) Listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return a.WrapListener(ln), nil
}

// WrapListener is Listen over an existing listener.
func (a *Auth) WrapListener(ln net.Listener) net.Listener {
	return tls.NewListener(ln, a.serverTLS.Clone())
}

// ListenHTTP returns a listener for a control HTTP server: TLS that
// verifies a client certificate if one is offered (and refuses one that
// fails), so that /health and /metrics can be scraped without one;
// HTTPHandler then refuses peer requests that came without one.
func (a *Auth) ListenHTTP(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, a.controlTLS.Clone()), nil
}

// Dial connects to a peer's stream listener and authenticates both ends
// before returning.
func (a *Auth) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := a.clientTLS.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg.ServerName = host
	}
	c := tls.Client(raw, cfg)
	if err := Handshake(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Handshake authenticates c (from Listen or Dial) now, within ctx and at
// most HandshakeTimeout, instead of on its first Read or Write. Other
// connections pass through.
func Handshake(ctx context.Context, c net.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if c, ok := c.(*tls.Conn); ok {
		if err := c.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("%w: tls with %v: %v", ErrAuth, c.RemoteAddr(), err)
		}
	}
	return nil
}

// HTTPHandler wraps h so that only authenticated peers reach it: a
// request must have come with a client certificate the handshake verified
// (signed by the CA, or carrying the pre-shared key's public key). Anyone
// else gets 401.
func (a *Auth) HTTPHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":{"kind":"auth","code":"peer_unauthenticated","message":"this endpoint accepts only authenticated bulkhead peers"}}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *Auth) authorized(r *http.Request) bool {
	if r.TLS == nil {
		return false
	}
	if a.mode == config.PeerAuthMTLS {
		return len(r.TLS.VerifiedChains) > 0
	}
	// The control listener's VerifyPeerCertificate refused any certificate
	// without the pinned key, so one that got here carries it; check again
	// rather than rely on that from afar.
	return len(r.TLS.PeerCertificates) > 0 && a.controlTLS.VerifyPeerCertificate([][]byte{r.TLS.PeerCertificates[0].Raw}, nil) == nil
}

// HTTPClient returns a client for control requests to peers: it presents
// this node's certificate and verifies the peer's. It sets no overall
// timeout, since generate streams last as long as decoding; bound each
// request with its context.
func (a *Auth) HTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // peers are addressed directly, never through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: HandshakeTimeout,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	tr.TLSClientConfig = a.clientTLS.Clone()
	return &http.Client{Transport: tr}
}
