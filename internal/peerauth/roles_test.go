package peerauth

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// TestIssuedCertificatesNameTheirRole: IssueNode puts exactly one role
// URI in a certificate, Load reads it back, and an unknown role is
// refused before anything is written.
func TestIssuedCertificatesNameTheirRole(t *testing.T) {
	as, ps := deployment(t)
	for _, r := range Roles() {
		if got := as[r].Role(); got != r {
			t.Errorf("%s certificate: role %q", r, got)
		}
		if err := as[r].ActAs(r); err != nil {
			t.Errorf("%s certificate acting as %s: %v", r, r, err)
		}
	}
	err := as[RolePrefill].ActAs(RoleRouter)
	if err == nil || !strings.Contains(err.Error(), ps[RolePrefill].Cert) || !strings.Contains(err.Error(), "role prefill") || !strings.Contains(err.Error(), "--role router") {
		t.Errorf("a prefill certificate acting as the router: %v; want a refusal naming the file, its role and the fix", err)
	}
	caDir := filepath.Dir(ps[RoleRouter].CA)
	if _, err := IssueNode(caDir, t.TempDir(), "n", Role("admin"), nil); err == nil || !strings.Contains(err.Error(), `"admin"`) {
		t.Errorf("an unknown role: %v", err)
	}
	if _, err := ParseRole(""); err == nil {
		t.Error("an empty role parsed")
	}
}

// TestStrictRoleMarker: a certificate whose role URI is missing, repeated,
// unknown or spelt another way has no role; Load refuses the ambiguous
// and malformed ones outright, and a roleless one cannot act as anything.
func TestStrictRoleMarker(t *testing.T) {
	_, ps := deployment(t)
	caDir := filepath.Dir(ps[RoleRouter].CA)
	now := time.Now()
	for _, c := range []struct {
		uris []string
		want string // in Load's error; "" for a certificate that loads without a role
	}{
		{nil, ""},
		{[]string{"spiffe://example.org/router"}, ""}, // other URIs are not roles
		{[]string{"bulkhead-role:router", "bulkhead-role:decode"}, "names 2 bulkhead roles"},
		{[]string{"bulkhead-role:router", "bulkhead-role:router"}, "names 2 bulkhead roles"},
		{[]string{"bulkhead-role:admin"}, "is not one of"},
		{[]string{"bulkhead-role:Router"}, "is not one of"},
		{[]string{"bulkhead-role:router?x=1"}, "is not one of"},
		{[]string{"bulkhead-role://router"}, "is not one of"},
	} {
		p := issueWith(t, caDir, now.Add(-time.Hour), now.Add(time.Hour), c.uris...)
		a, err := Load(p)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p.Cert) {
				t.Errorf("%v: Load %v; want a refusal naming %s and saying %q", c.uris, err, p.Cert, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.uris, err)
			continue
		}
		if a.Role() != "" {
			t.Errorf("%v: role %q, want none", c.uris, a.Role())
		}
		if err := a.ActAs(RoleRouter); err == nil || !strings.Contains(err.Error(), "no role") {
			t.Errorf("%v: a roleless certificate acting as the router: %v", c.uris, err)
		}
	}
}

// rolelessCert loads a valid certificate from the deployment's CA that
// names no role: the client every role check must refuse.
func rolelessCert(t *testing.T, ps map[Role]config.Peers) *Auth {
	t.Helper()
	now := time.Now()
	a, err := Load(issueWith(t, filepath.Dir(ps[RoleRouter].CA), now.Add(-time.Hour), now.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// refusal is a client a role check refuses and what its error must say,
// a row of the listener and endpoint tables below.
type refusal struct {
	client *Auth
	want   string
}

// TestStreamRoles: a KV listener that accepts only prefill refuses the
// router's certificate and a roleless one, and its error says which role
// was presented and which was needed; a prefill refuses to send to a
// server whose certificate is not a decode server's.
func TestStreamRoles(t *testing.T) {
	as, ps := deployment(t)
	roleless := rolelessCert(t, ps)
	for _, c := range []refusal{
		{as[RoleRouter], "presented a certificate with role router; this listener needs a certificate with role prefill"},
		{as[RoleDecode], "with role decode; this listener needs a certificate with role prefill"},
		{roleless, "with no bulkhead role"},
	} {
		d, s := stream(t, as[RoleDecode], c.client)
		if s == nil {
			t.Errorf("the decode KV listener accepted a %q client (client saw %v)", c.client.Role(), d)
			continue
		}
		if !errors.Is(s, ErrAuth) || !errors.Is(s, ErrRole) || !strings.Contains(s.Error(), c.want) {
			t.Errorf("a %q client: server error %v; want %q", c.client.Role(), s, c.want)
		}
		if d == nil {
			t.Errorf("a %q client read its echo from a listener that refused it", c.client.Role())
		}
	}
	// The client side: prefill dials a server holding the router's
	// certificate where it expects decode.
	ln, err := as[RoleRouter].Listen("tcp", "127.0.0.1:0", RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			Handshake(context.Background(), c)
			c.Close()
		}
	}()
	_, err = as[RolePrefill].Dial(context.Background(), ln.Addr().String(), RoleDecode)
	if err == nil || !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "the server at "+ln.Addr().String()+" presented a certificate with role router") ||
		!strings.Contains(err.Error(), "needs a certificate with role decode") {
		t.Errorf("prefill dialling a router-role server as decode: %v", err)
	}
}

// TestHTTPRoles: a router-only control endpoint answers the router, 403s
// any other role or a roleless certificate with a message naming both
// roles, and 401s no certificate; the router's client refuses a control
// server whose certificate is the router's.
func TestHTTPRoles(t *testing.T) {
	as, ps := deployment(t)
	roleless := rolelessCert(t, ps)
	dec := as[RoleDecode]
	if code, body := httpCall(t, dec, as[RoleRouter], true); code != 200 || body != "ok" {
		t.Errorf("the router: %d %q", code, body)
	}
	for _, c := range []refusal{
		{as[RolePrefill], "the client presented a certificate with role prefill; /peer/v1/info needs a certificate with role router"},
		{as[RoleDecode], "with role decode; /peer/v1/info needs a certificate with role router"},
		{roleless, "with no bulkhead role"},
	} {
		code, body := httpCall(t, dec, c.client, true)
		if code != 403 || !strings.Contains(body, c.want) || !strings.Contains(body, `"peer_role_forbidden"`) {
			t.Errorf("a %q client: %d %s; want 403 saying %q", c.client.Role(), code, body, c.want)
		}
	}
	if code, _ := httpCall(t, dec, as[RoleRouter], false); code != 401 {
		t.Errorf("no certificate: %d, want 401", code)
	}
	// Served with the router's own certificate: the router's client,
	// which calls only prefill and decode servers, refuses it.
	code, body := httpCall(t, as[RoleRouter], as[RoleRouter], true)
	if code != -1 || !strings.Contains(body, "the server presented a certificate with role router") {
		t.Errorf("a control server with the router's certificate: %d %s; want the client to refuse it", code, body)
	}
}

// TestPSKHasNoRoles: under psk every key holder is every role, as
// documented; the role checks must not lock a psk deployment out.
func TestPSKHasNoRoles(t *testing.T) {
	key := strings.Repeat("k", 40)
	a, b := psk(t, key), psk(t, key)
	if a.Role() != "" {
		t.Errorf("psk role %q", a.Role())
	}
	for _, r := range Roles() {
		if err := a.ActAs(r); err != nil {
			t.Errorf("psk acting as %s: %v", r, err)
		}
	}
	if code, _ := httpCall(t, a, b, true); code != 200 {
		t.Errorf("psk control call: %d", code)
	}
	ln, err := a.Listen("tcp", "127.0.0.1:0", RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	res := echo(ln)
	c, err := b.Dial(context.Background(), ln.Addr().String(), RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("psk stream: %q %v", got, err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Listen("tcp", "127.0.0.1:0"); err == nil {
		t.Error("Listen without a role to accept")
	}
}
