package peerauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
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
	// key: psk.go), and in that only mtls certificates carry a role
	// (roles.go).
	serverTLS, controlTLS, clientTLS *tls.Config
	role                             Role   // this node's own role; "" under psk
	certFile                         string // peers.cert, for ActAs's error
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
	// A certificate without a role loads (ActAs refuses it for every
	// role, with advice); one whose role marker is malformed or ambiguous
	// is refused here, since no role could ever accept it.
	role, err := CertRole(cert.Leaf)
	if err != nil && !errors.Is(err, errNoRole) {
		return nil, fmt.Errorf("peers.cert %s: %w", cfg.Cert, err)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	server := base.Clone()
	server.ClientCAs = roots
	server.ClientAuth = tls.RequireAndVerifyClientCert
	// The control listener verifies a client certificate when one is
	// given and leaves the decision to HTTPHandler, so that /health and
	// /ready can be probed without one; every other path requires it.
	control := server.Clone()
	control.ClientAuth = tls.VerifyClientCertIfGiven
	client := base.Clone()
	client.RootCAs = roots
	return &Auth{mode: config.PeerAuthMTLS, serverTLS: server, controlTLS: control, clientTLS: client, role: role, certFile: cfg.Cert}, nil
}

// Mode is config.PeerAuthMTLS or config.PeerAuthPSK.
func (a *Auth) Mode() string { return a.mode }

// Scheme is the URL scheme of control requests: "https" in both modes.
func (a *Auth) Scheme() string { return "https" }

// URL is the control URL of path on the peer at addr (host:port).
func (a *Auth) URL(addr, path string) string { return a.Scheme() + "://" + addr + path }

// ServerTLS is the TLS configuration of a stream listener: it requires a
// client certificate signed by the CA, or carrying the pre-shared key's
// public key. It checks no role: Listen and WrapListener add that.
func (a *Auth) ServerTLS() *tls.Config { return a.serverTLS.Clone() }

// ClientTLS presents this node's certificate and verifies the server's
// (against the CA, or the pre-shared key's public key). It checks no
// role: Dial and HTTPClient add that.
func (a *Auth) ClientTLS() *tls.Config { return a.clientTLS.Clone() }

// Listen returns a stream listener (the KV transfer endpoint) whose
// connections authenticate the peer before their first byte of data: TLS
// with a required client certificate that, under mtls, names one of
// allow. The handshake runs on the connection's first Read or Write, or
// explicitly with Handshake, never inside Accept, so one silent peer
// cannot stall the accept loop; a peer of another role fails it, and
// Handshake's error says which role it presented and which were allowed.
func (a *Auth) Listen(network, addr string, allow ...Role) (net.Listener, error) {
	if len(allow) == 0 {
		return nil, errors.New("peerauth: Listen needs the roles it accepts")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return a.WrapListener(ln, allow...), nil
}

// WrapListener is Listen over an existing listener. It panics without a
// role to accept: a listener open to every role has to be asked for by
// naming them all (Roles).
func (a *Auth) WrapListener(ln net.Listener, allow ...Role) net.Listener {
	if len(allow) == 0 {
		panic("peerauth: WrapListener needs the roles it accepts")
	}
	cfg := a.serverTLS.Clone()
	if a.mode == config.PeerAuthMTLS {
		cfg.VerifyConnection = verifyRole("the client", "this listener", allow)
	}
	return tls.NewListener(ln, cfg)
}

// ListenHTTP returns a listener for a control HTTP server: TLS that
// verifies a client certificate if one is offered (and refuses one that
// fails), so that /health and /ready can be probed without one;
// HTTPHandler then refuses requests that came without one, or with a
// certificate of a role the endpoint does not accept.
func (a *Auth) ListenHTTP(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, a.controlTLS.Clone()), nil
}

// Dial connects to a peer's stream listener and authenticates both ends
// before returning; under mtls the server's certificate must name want,
// so that what this node sends (a prefill server's KV) goes only to a
// server the CA made one of that role, not to any holder of a deployment
// certificate who got between the two. (Under
// TLS 1.3 the server judges the client's certificate after the client is
// done, so a server that refuses this node's role shows as an error on
// the first Read.)
func (a *Auth) Dial(ctx context.Context, addr string, want Role) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := a.clientTLS.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg.ServerName = host
	}
	if a.mode == config.PeerAuthMTLS {
		cfg.VerifyConnection = verifyRole("the server at "+addr, "a connection from this node", []Role{want})
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
			return fmt.Errorf("%w: tls with %v: %w", ErrAuth, c.RemoteAddr(), err)
		}
	}
	return nil
}

// HTTPHandler wraps h so that only authenticated peers of the roles in
// allow reach it: a request must have come with a client certificate the
// handshake verified (signed by the CA, or carrying the pre-shared key's
// public key), and under mtls that certificate must name one of allow.
// A request without one gets 401; one whose certificate names another
// role, or none, gets 403 with a message naming the role presented and
// the roles accepted. Under psk every key holder passes: the key carries
// no role. It panics without a role to accept.
func (a *Auth) HTTPHandler(h http.Handler, allow ...Role) http.Handler {
	if len(allow) == 0 {
		panic("peerauth: HTTPHandler needs the roles it accepts")
	}
	allow = slices.Clone(allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			refuse(w, http.StatusUnauthorized, "peer_unauthenticated", "this endpoint accepts only authenticated bulkhead peers")
			return
		}
		if a.mode == config.PeerAuthMTLS {
			if err := checkRole(r.TLS.VerifiedChains[0][0], "the client", r.URL.Path, allow); err != nil {
				refuse(w, http.StatusForbidden, "peer_role_forbidden", err.Error())
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// refuse writes peerauth's refusal in the peer API's error shape, so the
// router reports it as the peer refusing its credentials.
func refuse(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"kind": "auth", "code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
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
// this node's certificate and verifies the peer's, which under mtls must
// name one of want. It sets no overall timeout, since generate streams
// last as long as decoding; bound each request with its context. It
// panics without a role to accept.
func (a *Auth) HTTPClient(want ...Role) *http.Client {
	if len(want) == 0 {
		panic("peerauth: HTTPClient needs the roles of the servers it calls")
	}
	tr := &http.Transport{
		Proxy:               nil, // peers are addressed directly, never through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: HandshakeTimeout,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	tr.TLSClientConfig = a.clientTLS.Clone()
	if a.mode == config.PeerAuthMTLS {
		tr.TLSClientConfig.VerifyConnection = verifyRole("the server", "a control request from this node", want)
	}
	return &http.Client{Transport: tr}
}
