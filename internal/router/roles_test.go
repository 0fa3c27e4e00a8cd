package router

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// roleCerts makes a deployment CA and one certificate per role, loaded.
func roleCerts(t *testing.T) map[peerauth.Role]*peerauth.Auth {
	t.Helper()
	_, as := roleCertsAndCA(t)
	return as
}

// roleCertsAndCA is roleCerts that also returns the directory holding the
// CA, for the tests that issue more certificates from it.
func roleCertsAndCA(t *testing.T) (string, map[peerauth.Role]*peerauth.Auth) {
	t.Helper()
	dir := t.TempDir()
	ps, err := peerauth.MakeCerts(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	as := map[peerauth.Role]*peerauth.Auth{}
	for r, p := range ps {
		if as[r], err = peerauth.Load(p); err != nil {
			t.Fatal(err)
		}
	}
	return dir, as
}

// tlsRig is one prefill and one decode server over TLS, each with its
// role's certificate from as, and a router over them: the deployment most
// of the certificate tests start from, made in one place.
type tlsRig struct {
	f        *fakeCluster
	r        *Router
	pre, dec string                         // the prefill's and decode's addresses
	preSrv   *httptest.Server               // the prefill server
	preCert  *atomic.Pointer[peerauth.Auth] // the prefill's certificate, swappable
}

// startTLSRig serves the two peers and starts a router over them with o,
// its Auth, Prefill and Decode filled in; the router is closed when the
// test ends.
func startTLSRig(t *testing.T, as map[peerauth.Role]*peerauth.Auth, o Options) *tlsRig {
	t.Helper()
	g := &tlsRig{f: newFake()}
	g.pre, g.preSrv, g.preCert = tlsPeer(t, g.f, RolePrefill, 0, as[peerauth.RolePrefill])
	g.dec, _, _ = tlsPeer(t, g.f, RoleDecode, 0, as[peerauth.RoleDecode])
	o.Auth, o.Prefill, o.Decode = as[peerauth.RoleRouter], []string{g.pre}, []string{g.dec}
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	g.r = r
	return g
}

// redeployPrefill has the prefill server present cert from now on and
// drops the router's kept connections to it, as a restart would.
func (g *tlsRig) redeployPrefill(cert *peerauth.Auth) {
	g.preCert.Store(cert)
	g.preSrv.CloseClientConnections()
	// A restart leaves the router no kept connection. Its transport drops
	// one the server closed only once it reads the close, and a call that
	// took it first would fail on it (EOF): not what these tests are about.
	// (PREFILL is now replayed on a fresh connection then,
	// TestPrefillReplayedAfterKeptAliveClose; this keeps the rig exact.)
	for _, p := range g.r.prefill {
		p.client.CloseIdleConnections()
	}
}

// tlsPeer serves f's peer i of role (its Info says role) over TLS with
// the certificate of cert, which the returned pointer can swap, as a
// server redeployed at the same address would. Router connections are
// authenticated with the deployment CA, as peerauth's listeners do.
func tlsPeer(t *testing.T, f *fakeCluster, role string, i int, cert *peerauth.Auth) (string, *httptest.Server, *atomic.Pointer[peerauth.Auth]) {
	t.Helper()
	cur := new(atomic.Pointer[peerauth.Auth])
	cur.Store(cert)
	cfg := cert.ServerTLS()
	cfg.Certificates = nil // the client sends no SNI to an IP address: only GetCertificate can swap it
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c := cur.Load().ServerTLS().Certificates[0]
		return &c, nil
	}
	s := httptest.NewUnstartedServer(f.handler(role, i))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	s.Listener = tls.NewListener(s.Listener, cfg)
	s.Start()
	t.Cleanup(s.Close)
	return addr(s), s, cur
}

// TestRouterRequiresEachPeersCertificateRole: under mtls the router
// accepts at a prefill address only a server whose certificate the CA
// made a prefill server, and at a decode address only a decode server,
// whatever the server's Info claims. A server of another role refuses the
// start at once, naming the address, its list and both roles; the right
// certificates run a request over mutual TLS.
func TestRouterRequiresEachPeersCertificateRole(t *testing.T) {
	as := roleCerts(t)
	for _, c := range []struct {
		name       string
		pre, dec   peerauth.Role // the certificates served at the prefill and decode address
		bad, wrong string        // the refused address's list and the role its certificate names
	}{
		{"decode listed as prefill", peerauth.RoleDecode, peerauth.RoleDecode, "prefill", "decode"},
		{"prefill listed as decode", peerauth.RolePrefill, peerauth.RolePrefill, "decode", "prefill"},
		{"router listed as prefill", peerauth.RoleRouter, peerauth.RoleDecode, "prefill", "router"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			// Both servers claim the role of their list in their Info.
			pa, _, _ := tlsPeer(t, f, RolePrefill, 0, as[c.pre])
			da, _, _ := tlsPeer(t, f, RoleDecode, 0, as[c.dec])
			start := time.Now()
			_, err := New(context.Background(), Options{Auth: as[peerauth.RoleRouter], Prefill: []string{pa}, Decode: []string{da}, StartWait: 10 * time.Second})
			if err == nil {
				t.Fatalf("the router accepted a %s certificate at a %s address", c.wrong, c.bad)
			}
			bad := map[string]string{"prefill": pa, "decode": da}[c.bad]
			msg := err.Error()
			for _, want := range []string{bad, "peers." + c.bad, "presented a certificate with role " + c.wrong, "needs a certificate with role " + c.bad} {
				if !strings.Contains(msg, want) {
					t.Fatalf("error %q does not say %q", msg, want)
				}
			}
			t.Log(msg)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v: a wrong certificate was waited for as if the peer had not answered", d)
			}
		})
	}

	g := startTLSRig(t, as, Options{StartWait: 5 * time.Second})
	runAll(t, g.r, []string{"acme"}, 7, 3)
	if _, err := New(context.Background(), Options{Auth: as[peerauth.RoleRouter], Client: &http.Client{}, Prefill: []string{g.pre}, Decode: []string{g.dec}}); err == nil {
		t.Fatal("Options.Auth and Options.Client together were accepted")
	}
}

// TestPeerRedeployedWithAnotherRoleIsDown: a prefill address that starts
// answering with a decode certificate is marked down at its next health
// check, not after DownAfter of them (no retry changes a certificate),
// and gets no request.
func TestPeerRedeployedWithAnotherRoleIsDown(t *testing.T) {
	as := roleCerts(t)
	g := startTLSRig(t, as, Options{HealthEvery: 50 * time.Millisecond, DownAfter: 1000})
	f, r := g.f, g.r
	g.redeployPrefill(as[peerauth.RoleDecode]) // kept-alive connections verified the old certificate
	waitFor(t, "a prefill address serving a decode certificate was not marked down", func() bool { return !r.Peers()[0].Up })
	if why := r.Peers()[0].Why; !strings.Contains(why, "role decode") || !strings.Contains(why, "peers.prefill") {
		t.Fatalf("down because %q; want the roles named", why)
	}
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Code != "no_healthy_peer" {
		t.Fatalf("with the prefill down: %v", err)
	}
	if n := len(f.decodesAsked()); n != 0 {
		t.Fatalf("%d reservations with no prefill up", n)
	}
}

// TestPSKPeersHaveNoRoleToCheck: under psk the key carries no role, so
// the router's per-role clients must not lock a psk deployment out.
func TestPSKPeersHaveNoRoleToCheck(t *testing.T) {
	a, err := peerauth.NewPSK([]byte(strings.Repeat("k", peerauth.MinPSKBytes)))
	if err != nil {
		t.Fatal(err)
	}
	g := startTLSRig(t, map[peerauth.Role]*peerauth.Auth{peerauth.RolePrefill: a, peerauth.RoleDecode: a, peerauth.RoleRouter: a}, Options{})
	runAll(t, g.r, []string{"acme"}, 7, 3)
}
