package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	if code := run([]string{"certs", "--out", dir, "--hosts", "127.0.0.1,localhost"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	p := config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem")}
	if _, err := peerauth.Load(p); err != nil {
		t.Fatalf("the certificates do not load: %v", err)
	}
	if st, err := os.Stat(p.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("node key mode: %v %v", st.Mode(), err)
	}
	if !strings.Contains(out.String(), "auth: mtls") {
		t.Errorf("output: %s", out.String())
	}
	if code := run([]string{"certs"}, &out, &errb); code != 2 {
		t.Errorf("certs without --out: exit %d", code)
	}
	// A second machine's certificate from the same CA: its own key, the CA
	// certificate, no CA key; and a CA is never made over another.
	dir2 := filepath.Join(t.TempDir(), "decode-1")
	if code := run([]string{"certs", "--ca", dir, "--out", dir2, "--name", "decode-1", "--hosts", "10.0.0.5"}, &out, &errb); code != 0 {
		t.Fatalf("certs --ca: exit %d: %s", code, errb.String())
	}
	p2 := config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(dir2, "ca.pem"), Cert: filepath.Join(dir2, "decode-1.pem"), Key: filepath.Join(dir2, "decode-1-key.pem")}
	if _, err := peerauth.Load(p2); err != nil {
		t.Fatalf("the issued certificate does not load: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "ca-key.pem")); err == nil {
		t.Error("the CA key was copied to the node's directory")
	}
	errb.Reset()
	if code := run([]string{"certs", "--out", dir}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "already exists") {
		t.Errorf("certs over an existing CA: exit %d, %s", code, errb.String())
	}
}

// TestCertsFailureLeavesNoCA: when the node certificate cannot be issued
// (here a bad --name), the CA made for it is not left behind, so the
// corrected command succeeds instead of refusing to make a CA over it.
func TestCertsFailureLeavesNoCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	if code := run([]string{"certs", "--out", dir, "--name", "../router"}, &out, &errb); code == 0 {
		t.Fatalf("certs --name ../router: exit 0")
	}
	if strings.Contains(out.String(), "made a CA") {
		t.Errorf("a failed run claims to have made a CA: %s", out.String())
	}
	errb.Reset()
	if code := run([]string{"certs", "--out", dir, "--name", "router"}, &out, &errb); code != 0 {
		t.Fatalf("the corrected command: exit %d: %s", code, errb.String())
	}
}

// TestRolesRefuseWithoutPeerAuth: a prefill or decode server never runs
// unauthenticated.
func TestRolesRefuseWithoutPeerAuth(t *testing.T) {
	for _, role := range []string{"prefill", "decode"} {
		var out, errb bytes.Buffer
		code := run([]string{role, "--listen", "127.0.0.1:0"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "peers.auth is not set") || out.Len() != 0 {
			t.Errorf("%s without peer auth: exit %d, stdout %q, stderr %q", role, code, out.String(), errb.String())
		}
		if code := run([]string{role, "--faults", "explode=1"}, &out, &errb); code != 2 {
			t.Errorf("%s with a bad --faults: exit %d", role, code)
		}
	}
}
