package peerauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

// TestLoadRefusesExposedKeys: a node key or pre-shared key that other
// users can read lets them pose as any peer; Load refuses it and says
// which file and what to do. Group read (0640) is allowed.
func TestLoadRefusesExposedKeys(t *testing.T) {
	_, p := mtls(t)
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: true, 0o644: false, 0o660: false, 0o604: false} {
		if err := os.Chmod(p.Key, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		if ok && err != nil {
			t.Errorf("key mode %#o refused: %v", mode, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), p.Key) || !strings.Contains(err.Error(), "chmod 600")) {
			t.Errorf("key mode %#o: %v; want a refusal naming %s", mode, err, p.Key)
		}
	}
	path := filepath.Join(t.TempDir(), "psk")
	if err := os.WriteFile(path, []byte(strings.Repeat("k", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644) // whatever the umask
	if _, err := Load(config.Peers{Auth: config.PeerAuthPSK, PSKFile: path}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("world-readable psk file: %v", err)
	}
	// Whatever fails, the key itself is never quoted.
	if err := os.WriteFile(path, []byte("short-secret-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if _, err := Load(config.Peers{Auth: config.PeerAuthPSK, PSKFile: path}); err == nil || strings.Contains(err.Error(), "short-secret-key") {
		t.Errorf("psk error quotes the key or is nil: %v", err)
	}
}

// issueWith signs a node certificate with the CA in caDir, valid from
// notBefore to notAfter and carrying uris as URI SANs (none: a certificate
// with no role, as made before roles or by another CA tool), into a fresh
// directory; it returns the peers settings for it.
func issueWith(t *testing.T, caDir string, notBefore, notAfter time.Time, uris ...string) config.Peers {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: "test"},
		NotBefore: notBefore, NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	return issueTemplate(t, caDir, tmpl)
}

// issueTemplate signs tmpl (given a serial, a digital-signature key usage
// and 127.0.0.1 as its address) for a fresh key with the CA in caDir, and
// writes certificate and key into a fresh directory; it returns the peers
// settings for them.
func issueTemplate(t *testing.T, caDir string, tmpl *x509.Certificate) config.Peers {
	t.Helper()
	ca, caKey, err := loadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.KeyUsage = serial(), x509.KeyUsageDigitalSignature
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(caDir, CAFile), Cert: filepath.Join(dir, "n.pem"), Key: filepath.Join(dir, "n-key.pem")}
	if err := writePEM(p.Cert, "CERTIFICATE", der, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeKey(p.Key, key); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadChecksOwnCertificate: a node whose certificate has expired, is
// not valid yet, or comes from another CA than peers.ca would start and
// then fail every handshake, with the reason visible only to its peers.
// Load refuses it and names the file.
func TestLoadChecksOwnCertificate(t *testing.T) {
	caDir := t.TempDir()
	if err := MakeCA(caDir); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := issueWith(t, caDir, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := Load(good); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	expired := issueWith(t, caDir, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	if _, err := Load(expired); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), expired.Cert) {
		t.Errorf("an expired certificate: %v", err)
	}
	future := issueWith(t, caDir, now.Add(24*time.Hour), now.Add(48*time.Hour))
	if _, err := Load(future); err == nil || !strings.Contains(err.Error(), "not valid until") || !strings.Contains(err.Error(), future.Cert) {
		t.Errorf("a certificate not valid yet: %v", err)
	}
	// The right certificate with another deployment's CA file.
	_, other := mtls(t)
	wrongCA := good
	wrongCA.CA = other.CA
	if _, err := Load(wrongCA); err == nil || !strings.Contains(err.Error(), good.Cert) || !strings.Contains(err.Error(), other.CA) {
		t.Errorf("a certificate from another CA: %v", err)
	}
}

// TestLoadErrorsNameTheFile: an unreadable certificate or key says which
// file, not only "certificate input" or "key input".
func TestLoadErrorsNameTheFile(t *testing.T) {
	_, p := mtls(t)
	if err := os.WriteFile(p.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p.Key) {
		t.Errorf("a garbled key: %v", err)
	}
	_, q := mtls(t)
	if err := os.WriteFile(q.Cert, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(q); err == nil || !strings.Contains(err.Error(), q.Cert) {
		t.Errorf("a garbled certificate: %v", err)
	}
}

// TestSecretsNeverOverwritten: WritePSK into an existing file used to
// keep that file's mode (0644 here: the new key world-readable) and
// silently replace the deployment's key; a key file whose path is a
// dangling symbolic link used to be written wherever the link pointed.
func TestSecretsNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "psk")
	if err := os.WriteFile(path, []byte("old key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if err := WritePSK(path); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("WritePSK over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old key\n" {
		t.Errorf("the existing key was replaced: %q", b)
	}
	fresh := filepath.Join(dir, "psk2")
	if err := WritePSK(fresh); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("fresh psk file: %v %v", st.Mode(), err)
	}

	caDir := t.TempDir()
	if err := MakeCA(caDir); err != nil {
		t.Fatal(err)
	}
	out, elsewhere := t.TempDir(), filepath.Join(t.TempDir(), "stolen-key.pem")
	if err := os.Symlink(elsewhere, filepath.Join(out, "n-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := IssueNode(caDir, out, "n", RolePrefill, nil); err == nil {
		t.Error("IssueNode wrote its key through a symbolic link")
	}
	if _, err := os.Stat(elsewhere); err == nil {
		t.Error("the node key landed where the symbolic link pointed")
	}
	if _, err := os.Stat(filepath.Join(out, "n.pem")); err == nil {
		t.Error("a certificate was left behind without its key")
	}
}
