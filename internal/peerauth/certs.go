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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// Files of the CA that MakeCA writes. A node certificate (IssueNode) is
// NAME.pem and NAME-key.pem.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// MakeCerts makes a private CA and one node certificate per role that it
// signs, for local use and tests: ECDSA P-256, valid for a year, naming
// hosts (IP addresses and DNS names). It writes CAFile and CAKeyFile and,
// for each role, ROLE.pem and ROLE-key.pem (keys mode 0600) into dir, and
// returns each role's peers settings. Every process needs the certificate
// of its own role: one certificate no longer serves every role.
func MakeCerts(dir string, hosts []string) (map[Role]config.Peers, error) {
	if err := MakeCA(dir); err != nil {
		return nil, err
	}
	out := map[Role]config.Peers{}
	for _, r := range Roles() {
		p, err := IssueNode(dir, dir, string(r), r, hosts)
		if err != nil {
			return nil, err
		}
		out[r] = p
	}
	return out, nil
}

// MakeCA makes a private CA (ECDSA P-256, valid for a year) and writes
// CAFile and CAKeyFile (mode 0600) into dir. It refuses to replace a CA
// already there: every certificate that CA signed would stop working.
func MakeCA(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := refuseExisting("pass it as the CA to issue more node certificates, or use another directory",
		filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: CA key: %w", err)
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
		return fmt.Errorf("certs: CA certificate: %w", err)
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), caKey); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", caDER, 0o644)
}

// IssueNode signs a node certificate for name with the CA in caDir (CAFile
// and CAKeyFile), valid for a year for hosts (IP addresses and DNS names;
// loopback when empty) and for both server and client authentication,
// naming role (RoleURI: the one role its holder may act as), and writes
// it as NAME.pem and NAME-key.pem (mode 0600) into outDir, with a copy of
// CAFile when outDir is another directory. The CA key is never copied: a
// machine that runs one role gets its own certificate and key, the CA
// certificate, and nothing that can sign. It returns the peers settings
// that use the files.
func IssueNode(caDir, outDir, name string, role Role, hosts []string) (config.Peers, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || name == "ca" || name == "ca-key" {
		return config.Peers{}, fmt.Errorf("certs: node name %q must be a plain file name other than ca", name)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return config.Peers{}, fmt.Errorf("certs: %w", err)
	}
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	ca, caKey, err := loadCA(caDir)
	if err != nil {
		return config.Peers{}, err
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return config.Peers{}, fmt.Errorf("certs: %w", err)
	}
	p := config.Peers{
		Auth: config.PeerAuthMTLS,
		CA:   filepath.Join(outDir, CAFile), Cert: filepath.Join(outDir, name+".pem"), Key: filepath.Join(outDir, name+"-key.pem"),
	}
	if err := refuseExisting("choose another node name or directory", p.Cert, p.Key); err != nil {
		return config.Peers{}, err
	}
	now := time.Now()
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.Peers{}, fmt.Errorf("certs: node key: %w", err)
	}
	nodeTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "bulkhead peer " + name + " (" + string(role) + ")"},
		URIs:         []*url.URL{RoleURI(role)},
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
	if filepath.Clean(outDir) != filepath.Clean(caDir) {
		if err := writePEM(p.CA, "CERTIFICATE", ca.Raw, 0o644); err != nil {
			return config.Peers{}, err
		}
	}
	if err := writePEM(p.Cert, "CERTIFICATE", nodeDER, 0o644); err != nil {
		return config.Peers{}, err
	}
	if err := writeKey(p.Key, nodeKey); err != nil {
		os.Remove(p.Cert) // a certificate without its key only blocks a rerun
		return config.Peers{}, err
	}
	return p, nil
}

// refuseExisting fails, saying what to do instead, if any of paths
// exists: certificates and keys are never overwritten.
func refuseExisting(instead string, paths ...string) error {
	for _, f := range paths {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("certs: %s already exists; %s", f, instead)
		}
	}
	return nil
}

// loadCA reads the CA certificate and key MakeCA wrote into dir.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA key: %w (issuing node certificates needs the CA's key; it stays on the machine that made the CA)", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("certs: %s holds no PEM certificate", filepath.Join(dir, CAFile))
	}
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, fmt.Errorf("certs: %s holds no PEM private key", filepath.Join(dir, CAKeyFile))
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", filepath.Join(dir, CAFile), err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("certs: %s is not a CA certificate", filepath.Join(dir, CAFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", filepath.Join(dir, CAKeyFile), err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("certs: %s is not the key of %s", filepath.Join(dir, CAKeyFile), filepath.Join(dir, CAFile))
	}
	return ca, key, nil
}

// WritePSK writes a fresh random pre-shared key (64 hex digits) to path,
// mode 0600, for psk mode. It refuses a path that exists: replacing a
// deployment's key cuts every peer off, and writing into an existing
// file would keep that file's mode, world-readable perhaps.
func WritePSK(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("psk: %w", err)
	}
	if err := createExclusive(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
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
	b := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := createExclusive(path, b, 0o600); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
