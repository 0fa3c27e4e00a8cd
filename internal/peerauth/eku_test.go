package peerauth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// issueEKU loads a certificate from the CA in caDir for role with exactly
// the extended key usages eku, as another CA tool might make it.
func issueEKU(t *testing.T, caDir string, role Role, eku ...x509.ExtKeyUsage) *Auth {
	t.Helper()
	now := time.Now()
	a, err := Load(issueTemplate(t, caDir, &x509.Certificate{
		Subject:   pkix.Name{CommonName: "eku test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: eku, URIs: []*url.URL{RoleURI(role)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestHandshakesRequireTheDirectionsEKU: under mtls a TLS client's
// certificate must allow client authentication and a server's server
// authentication (extended key usage), beside naming the right role. The
// certificates IssueNode makes allow both for every role; a certificate
// narrowed to what its role needs (router: client; decode: server;
// prefill: both, server of its control endpoint and client of decode's KV
// listener) works in its own direction and is refused in the other, so
// narrowing them is enforced by the handshakes as they are.
func TestHandshakesRequireTheDirectionsEKU(t *testing.T) {
	as, ps := deployment(t)
	caDir := filepath.Dir(ps[RoleRouter].CA)
	clientOnly := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serverOnly := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}

	// In their own direction, narrowed certificates work.
	if d, s := stream(t, issueEKU(t, caDir, RoleDecode, serverOnly...), issueEKU(t, caDir, RolePrefill, clientOnly...)); d != nil || s != nil {
		t.Fatalf("a server-only decode and a client-only prefill: dial %v, server %v", d, s)
	}
	if code, body := httpCall(t, as[RoleDecode], issueEKU(t, caDir, RoleRouter, clientOnly...), true); code != 200 {
		t.Fatalf("a client-only router calling decode: %d %s", code, body)
	}
	// In the other, the handshake refuses them.
	if _, s := stream(t, as[RoleDecode], issueEKU(t, caDir, RolePrefill, serverOnly...)); s == nil || !strings.Contains(s.Error(), "key usage") {
		t.Errorf("decode's KV listener took a client certificate without client authentication: %v", s)
	}
	if d, _ := stream(t, issueEKU(t, caDir, RoleDecode, clientOnly...), as[RolePrefill]); d == nil || !strings.Contains(d.Error(), "key usage") {
		t.Errorf("prefill took a decode server certificate without server authentication: %v", d)
	}
	if code, body := httpCall(t, as[RoleDecode], issueEKU(t, caDir, RoleRouter, serverOnly...), true); code == 200 {
		t.Errorf("decode's control endpoint took a router certificate without client authentication: %d %s", code, body)
	}
}
