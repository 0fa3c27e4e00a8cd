package peerauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"time"
)

// checkPrivate refuses a secret file (a private key or the pre-shared
// key) that users other than its owner and group can read, or that its
// group can change: anyone who can read it can pose as any peer of the
// deployment. Group read is allowed so that a key can be shared with a
// service group (a Kubernetes secret mounted 0440 with fsGroup, say).
// setting names the config field, so the error says what to fix.
func checkPrivate(setting, path string) error {
	if runtime.GOOS == "windows" {
		return nil // permission bits mean nothing there; ACLs decide
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	if perm := st.Mode().Perm(); perm&0o037 != 0 {
		return fmt.Errorf("%s %s is mode %#o, so other users can read or change it; a peer key must be readable by its owner (and group) only: chmod 600 %s", setting, path, perm, path)
	}
	return nil
}

// loadKeyPair reads this node's certificate and key, and checks that the
// certificate is valid now and signed by roots, so that a node with an
// expired certificate, or one from another CA, refuses to start and says
// which file is wrong, rather than starting and then failing every
// handshake with a message only its peers see.
func loadKeyPair(certFile, keyFile, caFile string, roots *x509.CertPool, now time.Time) (tls.Certificate, error) {
	if err := checkPrivate("peers.key", keyFile); err != nil {
		return tls.Certificate{}, err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("peers.cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("peers.key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The error names which input was wrong but not the file; it
		// never quotes the key.
		return tls.Certificate{}, fmt.Errorf("peers.cert %s, peers.key %s: %w", certFile, keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("peers.cert %s: %w", certFile, err)
		}
		cert.Leaf = leaf // Load reads the role from it
	}
	switch {
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("peers.cert %s is not valid until %s (is this machine's clock right?)", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("peers.cert %s expired on %s: issue a new one (bulkhead certs --ca DIR --role ROLE)", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	// Any usage: which of server and client authentication a node needs
	// depends on its role, and each handshake checks that.
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		return tls.Certificate{}, fmt.Errorf("peers.cert %s does not verify against peers.ca %s, so no peer would accept it: %w", certFile, caFile, err)
	}
	return cert, nil
}

// createExclusive writes b to a new file at path with mode, refusing a
// path that exists (even as a dangling symbolic link): credentials are
// never overwritten, and a file made this way has exactly mode (less the
// umask), where os.WriteFile keeps the mode of a file already there.
func createExclusive(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s already exists; remove it first or choose another path", path)
		}
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
