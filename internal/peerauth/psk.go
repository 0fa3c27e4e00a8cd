package peerauth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// Under psk, peers speak the same TLS 1.3 as under mtls, with one key pair
// that every holder of the pre-shared key derives from it (HKDF-SHA256,
// then an Ed25519 seed). Each process signs its own certificate with that
// key, and each end of a connection requires the other's certificate to
// carry exactly the derived public key. So the pre-shared key never
// crosses the network (a bearer token would, to anyone watching a plain
// HTTP call), every byte after the handshake is encrypted and
// integrity-protected (a challenge–response at the start of a plain TCP
// stream left the rest open to tampering), and a peer proves it holds the
// key by TLS's own signature over the handshake.

// pskInfo labels the derivation, so that the same key used elsewhere
// gives an unrelated key pair.
const pskInfo = "bulkhead peer psk v2: ed25519 identity"

// newPSK builds the psk-mode Auth for key.
func newPSK(key []byte) (*Auth, error) {
	seed, err := hkdf.Key(sha256.New, key, nil, pskInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("peers.psk_file: deriving the peer key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "bulkhead peer (pre-shared key)"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("peers.psk_file: making the peer certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
	pinned := func(required bool) func([][]byte, [][]*x509.Certificate) error {
		return func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				if required {
					return errNoKey
				}
				return nil // the control listener: HTTPHandler decides
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return fmt.Errorf("the peer's certificate: %w", err)
			}
			if k, ok := leaf.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
				return errNoKey
			}
			return nil
		}
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	server := base.Clone()
	server.ClientAuth = tls.RequireAnyClientCert
	server.VerifyPeerCertificate = pinned(true)
	control := base.Clone()
	control.ClientAuth = tls.RequestClientCert
	control.VerifyPeerCertificate = pinned(false)
	client := base.Clone()
	// The pin replaces the chain and the name: there is no CA, and a
	// peer is whoever holds the key, whatever its address.
	client.InsecureSkipVerify = true
	client.VerifyPeerCertificate = pinned(true)
	return &Auth{mode: config.PeerAuthPSK, serverTLS: server, controlTLS: control, clientTLS: client}, nil
}

// errNoKey is the handshake's verdict on a peer whose certificate does not
// carry the key derived from this pre-shared key.
var errNoKey = errors.New("the peer does not hold this pre-shared key")
