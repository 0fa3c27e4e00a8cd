package peerauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// Under mtls every node certificate names the one role its holder may act
// as, so that a certificate the deployment CA signed for a prefill server
// cannot reserve or generate on a decode server as if it were the router,
// nor a router's open KV streams as if it were a prefill server. The role
// is a URI subject alternative name, bulkhead-role:ROLE: a SAN is covered
// by the CA's signature like the rest of the certificate, any CA tool can
// put one in (OpenSSL: subjectAltName = URI:bulkhead-role:router), and it
// needs no private OID or extension that other tools would not show. The
// check is strict: exactly one role URI, spelt as RoleURI spells it (the
// scheme is case-insensitive, as in every URI), naming a known role; a
// certificate with none, two, or an unknown or decorated one is refused
// wherever a role is required.
//
// Under psk there are no roles: every holder of the key derives the same
// certificate, so a prefill server and the router cannot be told apart.

// Role is what a peer may do in the deployment.
type Role string

// The roles of a deployment.
const (
	RoleRouter  Role = "router"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// RoleURIScheme is the scheme of the URI SAN that names a certificate's
// role (RoleURI).
const RoleURIScheme = "bulkhead-role"

// Roles lists every role, for a handler that any peer of the deployment
// may call (an operator's scrape of /metrics with a peer certificate).
func Roles() []Role { return []Role{RoleRouter, RolePrefill, RoleDecode} }

// ParseRole accepts the name of a role, as `bulkhead certs --role` takes it.
func ParseRole(s string) (Role, error) {
	if r := Role(s); slices.Contains(Roles(), r) {
		return r, nil
	}
	return "", fmt.Errorf("unknown peer role %q; want router, prefill or decode", s)
}

// RoleURI is the URI SAN that IssueNode puts in a certificate for r.
func RoleURI(r Role) *url.URL { return &url.URL{Scheme: RoleURIScheme, Opaque: string(r)} }

// errNoRole is CertRole's verdict on a certificate that names no role.
var errNoRole = errors.New("the certificate names no bulkhead role")

// CertRole returns the role c names. It fails for a certificate that
// names none (errNoRole), more than one, an unknown one, or one spelt in
// any but the canonical form: a lenient parser would be a second
// definition of the marker that a CA's policy might not have meant.
func CertRole(c *x509.Certificate) (Role, error) {
	var found []string
	for _, u := range c.URIs {
		if strings.EqualFold(u.Scheme, RoleURIScheme) {
			found = append(found, u.String())
		}
	}
	switch len(found) {
	case 0:
		return "", errNoRole
	case 1:
	default:
		return "", fmt.Errorf("the certificate names %d bulkhead roles (%s); a peer certificate names exactly one", len(found), strings.Join(found, ", "))
	}
	for _, r := range Roles() {
		if found[0] == RoleURI(r).String() {
			return r, nil
		}
	}
	return "", fmt.Errorf("the certificate's role URI %q is not one of %s:router, %s:prefill or %s:decode", found[0], RoleURIScheme, RoleURIScheme, RoleURIScheme)
}

// describeRole says which role a peer's certificate presented, for
// errors: its role, "no role", or why its role URI was refused.
func describeRole(r Role, err error) string {
	switch {
	case err == nil:
		return "role " + string(r)
	case errors.Is(err, errNoRole):
		return "no bulkhead role (a certificate issued before roles existed, or by a CA that does not add one)"
	}
	return "an invalid role (" + err.Error() + ")"
}

// joinRoles spells allow for errors: "router", "prefill or decode".
func joinRoles(allow []Role) string {
	s := make([]string, len(allow))
	for i, r := range allow {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// ErrRole is wrapped by every refusal of a verified peer whose
// certificate names the wrong role, or none.
var ErrRole = errors.New("peer role refused")

// checkRole is the role check of every endpoint and every dial: nil when
// leaf names one of allow, else an error that says who presented what
// (who: "the client", "the server at ADDR") and what needed which roles
// (what: "this listener", "/peer/v1/generate", ...).
func checkRole(leaf *x509.Certificate, who, what string, allow []Role) error {
	r, err := CertRole(leaf)
	if err == nil && slices.Contains(allow, r) {
		return nil
	}
	return fmt.Errorf("%w: %s presented a certificate with %s; %s needs a certificate with role %s",
		ErrRole, who, describeRole(r, err), what, joinRoles(allow))
}

// verifyRole returns a tls.Config.VerifyConnection that refuses a peer
// whose verified certificate does not name one of allow (mtls only). A
// server runs it once the client's certificate verified, a client once
// the server's did, resumed sessions included.
func verifyRole(who, what string, allow []Role) func(tls.ConnectionState) error {
	allow = slices.Clone(allow)
	return func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return fmt.Errorf("%w: %s presented no verified certificate to read a role from", ErrRole, who)
		}
		return checkRole(cs.VerifiedChains[0][0], who, what, allow)
	}
}

// Role is the role of this node's own certificate ("" under psk, or for a
// certificate that names none).
func (a *Auth) Role() Role { return a.role }

// ActAs refuses to run as role with a certificate issued for another one
// (mtls), so that a misplaced certificate stops the process at start,
// naming the file, instead of having every peer refuse it. Under psk it
// accepts every role, since the key carries none.
func (a *Auth) ActAs(role Role) error {
	if a.mode != config.PeerAuthMTLS || a.role == role {
		return nil
	}
	have := "no role"
	if a.role != "" {
		have = "role " + string(a.role)
	}
	return fmt.Errorf("peers.cert %s has %s, but this process runs as %s and its peers accept only a %s certificate here: issue one with `bulkhead certs --ca DIR --role %s`",
		a.certFile, have, role, role, role)
}

// Authorize checks that c, a connection from Listen whose handshake is
// done (Handshake), came from a peer of one of allow: under mtls, that
// its verified certificate names one of those roles; under psk, only that
// it authenticated. where names the endpoint in the error. Listen checks
// the same in the handshake; a server that owns the promise "only this
// role sends here" checks again rather than rely on how its listener was
// made.
func (a *Auth) Authorize(c net.Conn, where string, allow ...Role) error {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return fmt.Errorf("%w: %s: the connection from %v is not an authenticated peer connection", ErrAuth, where, c.RemoteAddr())
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: %s: the connection from %v has not authenticated", ErrAuth, where, c.RemoteAddr())
	}
	if a.mode != config.PeerAuthMTLS {
		return nil
	}
	if len(cs.VerifiedChains) == 0 {
		return fmt.Errorf("%w: %s: the certificate of %v did not verify", ErrAuth, where, c.RemoteAddr())
	}
	return checkRole(cs.VerifiedChains[0][0], fmt.Sprintf("the client at %v", c.RemoteAddr()), where, allow)
}
