package peerauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// Files MakeCerts writes in its directory.
const (
	CAFile      = "ca.pem"
	CAKeyFile   = "ca-key.pem"
	NodeFile    = "node.pem"
	NodeKeyFile = "node-key.pem"
)

// MakeCerts makes a private CA and one node certificate it signs, for
// local use: ECDSA P-256, valid for a year, the node certificate naming
// hosts (IP addresses and DNS names) and good for both server and client
// authentication, so every role of a local deployment can share it. It
// writes CAFile, CAKeyFile, NodeFile and NodeKeyFile into dir (keys mode
// 0600) and returns the peers settings that use them.
func MakeCerts(dir string, hosts []string) (config.Peers, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return config.Peers{}, fmt.Errorf("certs: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "bulkhead local peer CA " + hex.EncodeToString(serial().Bytes()[:4])},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: CA certificate: %w", err)
	}
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: node key: %w", err)
	}
	nodeTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "bulkhead peer"},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			nodeTmpl.IPAddresses = append(nodeTmpl.IPAddresses, ip)
		} else if h != "" {
			nodeTmpl.DNSNames = append(nodeTmpl.DNSNames, h)
		}
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, nodeTmpl, ca, &nodeKey.PublicKey, caKey)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: node certificate: %w", err)
	}
	p := config.Peers{
		Auth: config.PeerAuthMTLS,
		CA:   filepath.Join(dir, CAFile), Cert: filepath.Join(dir, NodeFile), Key: filepath.Join(dir, NodeKeyFile),
	}
	if err := writePEM(p.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return config.Peers{}, err
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), caKey); err != nil {
		return config.Peers{}, err
	}
	if err := writePEM(p.Cert, "CERTIFICATE", nodeDER, 0o644); err != nil {
		return config.Peers{}, err
	}
	if err := writeKey(p.Key, nodeKey); err != nil {
		return config.Peers{}, err
	}
	return p, nil
}

// WritePSK writes a fresh random pre-shared key (64 hex digits) to path,
// mode 0600, for psk mode.
func WritePSK(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("psk: %w", err)
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		return fmt.Errorf("psk: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("peerauth: crypto/rand failed: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
