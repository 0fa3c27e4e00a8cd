package peerauth

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
)

// KeyIdentity is the SHA-256 of the public key (the SubjectPublicKeyInfo)
// of the certificate the other end of a TLS connection presented: how a
// decode server tells which prefill server a KV connection comes from,
// and how the router names the prefill it chose for a transfer, from its
// own connection to that prefill's control endpoint (transfer.Identity).
// The key rather than the certificate, because the handshake proves the
// peer holds the key; the same process presents the same key as a server
// and as a client. ok is false when cs is nil or carries no certificate.
//
// Under psk every holder of the pre-shared key derives the same key, so
// every peer has the same identity: it tells no two psk peers apart.
func KeyIdentity(cs *tls.ConnectionState) (id [32]byte, ok bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return id, false
	}
	return sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo), true
}

// ConnKeyIdentity is KeyIdentity of c, a connection from Listen or Dial
// whose handshake is done (Handshake); ok is false for any other.
func ConnKeyIdentity(c net.Conn) (id [32]byte, ok bool) {
	tc, isTLS := c.(*tls.Conn)
	if !isTLS {
		return id, false
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete {
		return id, false
	}
	return KeyIdentity(&cs)
}

// Identity is KeyIdentity as this node's peers see it: the SHA-256 of
// the public key of its own certificate. A prefill server can log it, so
// that an operator can match decode's "expected" and "presented" prefixes
// to a process.
func (a *Auth) Identity() [32]byte {
	c := a.clientTLS.Certificates[0]
	leaf := c.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			// Load and NewPSK parsed or made this certificate already.
			panic(fmt.Sprintf("peerauth: this node's own certificate does not parse: %v", err))
		}
	}
	return sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
}
