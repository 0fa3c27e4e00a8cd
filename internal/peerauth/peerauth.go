package peerauth

import (
	"bytes"
	"context"
	"crypto/subtle"
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
	// mtls
	serverTLS, controlTLS, clientTLS *tls.Config
	// psk
	psk []byte
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
	return &Auth{mode: config.PeerAuthPSK, psk: append([]byte(nil), key...)}, nil
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
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("peers.cert/peers.key: %w", err)
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

// Scheme is the URL scheme of control requests: "https" under mtls,
// "http" under psk.
func (a *Auth) Scheme() string {
	if a.mode == config.PeerAuthMTLS {
		return "https"
	}
	return "http"
}

// URL is the control URL of path on the peer at addr (host:port).
func (a *Auth) URL(addr, path string) string { return a.Scheme() + "://" + addr + path }

// ServerTLS is the TLS configuration of a stream listener: it requires a
// client certificate signed by the CA. Nil under psk.
func (a *Auth) ServerTLS() *tls.Config {
	if a.serverTLS == nil {
		return nil
	}
	return a.serverTLS.Clone()
}

// ClientTLS presents this node's certificate and verifies the server
// against the CA. Nil under psk.
func (a *Auth) ClientTLS() *tls.Config {
	if a.clientTLS == nil {
		return nil
	}
	return a.clientTLS.Clone()
}

// Listen returns a stream listener (the KV transfer endpoint) whose
// connections authenticate the peer before their first byte of data: TLS
// with a required client certificate, or the PSK challenge–response. The
// handshake runs on the connection's first Read or Write, or explicitly
// with Handshake, never inside Accept, so one silent peer cannot stall
// the accept loop.
func (a *Auth) Listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return a.WrapListener(ln), nil
}

// WrapListener is Listen over an existing listener.
func (a *Auth) WrapListener(ln net.Listener) net.Listener {
	if a.mode == config.PeerAuthMTLS {
		return tls.NewListener(ln, a.serverTLS.Clone())
	}
	return &pskListener{Listener: ln, key: a.psk}
}

// ListenHTTP returns a listener for a control HTTP server. Under mtls it
// is TLS that verifies a client certificate if one is offered; HTTPHandler
// then refuses peer requests without one. Under psk it is plain TCP and
// HTTPHandler checks the bearer token.
func (a *Auth) ListenHTTP(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if a.mode == config.PeerAuthMTLS {
		return tls.NewListener(ln, a.controlTLS.Clone()), nil
	}
	return ln, nil
}

// Dial connects to a peer's stream listener and authenticates both ends
// before returning.
func (a *Auth) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	if a.mode == config.PeerAuthMTLS {
		cfg := a.clientTLS.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
		c = tls.Client(raw, cfg)
	} else {
		c = newPSKConn(raw, a.psk, true)
	}
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
	switch c := c.(type) {
	case *tls.Conn:
		if err := c.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("%w: tls with %v: %v", ErrAuth, c.RemoteAddr(), err)
		}
	case *pskConn:
		return c.handshakeContext(ctx)
	}
	return nil
}

// HTTPHandler wraps h so that only authenticated peers reach it: under
// mtls a request must have come with a verified client certificate; under
// psk it must carry `Authorization: Bearer <key>`. Anyone else gets 401.
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
	if a.mode == config.PeerAuthMTLS {
		return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(got), a.psk) == 1
}

func bearer(h string) (string, bool) {
	const p = "Bearer "
	if len(h) < len(p) || !bytes.EqualFold([]byte(h[:len(p)]), []byte(p)) {
		return "", false
	}
	return h[len(p):], true
}

// HTTPClient returns a client for control requests to peers: it presents
// this node's certificate (mtls) or adds the bearer token (psk). It sets
// no overall timeout, since generate streams last as long as decoding;
// bound each request with its context.
func (a *Auth) HTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // peers are addressed directly, never through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: HandshakeTimeout,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	if a.mode == config.PeerAuthMTLS {
		tr.TLSClientConfig = a.clientTLS.Clone()
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: &bearerTransport{base: tr, token: "Bearer " + string(a.psk)}}
}

// bearerTransport adds the pre-shared key to every request.
type bearerTransport struct {
	base  http.RoundTripper
	token string
}

// RoundTrip implements http.RoundTripper.
func (t *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.token)
	return t.base.RoundTrip(r)
}
