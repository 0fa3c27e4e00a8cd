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
	if code := run([]string{"certs", "--out", dir, "--role", "router", "--hosts", "127.0.0.1,localhost"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	// Without --name, the certificate is named after its role.
	p := config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "router.pem"), Key: filepath.Join(dir, "router-key.pem")}
	if a, err := peerauth.Load(p); err != nil {
		t.Fatalf("the certificates do not load: %v", err)
	} else if a.Role() != peerauth.RoleRouter {
		t.Errorf("certs --role router made a certificate with role %q", a.Role())
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
	if code := run([]string{"certs", "--ca", dir, "--out", dir2, "--name", "decode-1", "--role", "decode", "--hosts", "10.0.0.5"}, &out, &errb); code != 0 {
		t.Fatalf("certs --ca: exit %d: %s", code, errb.String())
	}
	p2 := config.Peers{Auth: config.PeerAuthMTLS, CA: filepath.Join(dir2, "ca.pem"), Cert: filepath.Join(dir2, "decode-1.pem"), Key: filepath.Join(dir2, "decode-1-key.pem")}
	if a, err := peerauth.Load(p2); err != nil {
		t.Fatalf("the issued certificate does not load: %v", err)
	} else if a.Role() != peerauth.RoleDecode {
		t.Errorf("certs --role decode made a certificate with role %q", a.Role())
	}
	if _, err := os.Stat(filepath.Join(dir2, "ca-key.pem")); err == nil {
		t.Error("the CA key was copied to the node's directory")
	}
	errb.Reset()
	if code := run([]string{"certs", "--out", dir, "--role", "prefill"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "already exists") {
		t.Errorf("certs over an existing CA: exit %d, %s", code, errb.String())
	}
}

// TestCertsFailureLeavesNoCA: when the node certificate cannot be issued
// (here a bad --name), the CA made for it is not left behind, so the
// corrected command succeeds instead of refusing to make a CA over it.
func TestCertsFailureLeavesNoCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	if code := run([]string{"certs", "--out", dir, "--role", "router", "--name", "../router"}, &out, &errb); code == 0 {
		t.Fatalf("certs --name ../router: exit 0")
	}
	if strings.Contains(out.String(), "made a CA") {
		t.Errorf("a failed run claims to have made a CA: %s", out.String())
	}
	errb.Reset()
	if code := run([]string{"certs", "--out", dir, "--role", "router", "--name", "router"}, &out, &errb); code != 0 {
		t.Fatalf("the corrected command: exit %d: %s", code, errb.String())
	}
}

// TestCertsNeedsARole: a certificate without a role would be refused by
// every peer endpoint, and any default role would be wrong for two
// machines out of three, so `certs` without --role (the command as it
// was invoked before roles) is a usage error that says what to add, and
// makes no CA on its way out; an unknown role likewise.
func TestCertsNeedsARole(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--role is required: router, prefill or decode"},
		{[]string{"--name", "decode-1"}, "--role is required"},
		{[]string{"--role", "admin"}, `unknown peer role "admin"`},
	} {
		dir := filepath.Join(t.TempDir(), "pki")
		var out, errb bytes.Buffer
		code := run(append([]string{"certs", "--out", dir}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("certs %v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "ca.pem")); err == nil {
			t.Errorf("certs %v made a CA although it issued nothing", c.args)
		}
	}
}

// TestRolesRefuseAnotherRolesCertificate: a process started with a
// certificate issued for another role, or for none, stops at once and
// says which file, which role it has and how to get the right one,
// instead of starting and having every peer refuse it.
func TestRolesRefuseAnotherRolesCertificate(t *testing.T) {
	peers := makePeers(t)
	for _, c := range []struct{ cmd, cert, has string }{
		{"decode", "router", "role router"},
		{"prefill", "decode", "role decode"},
		{"router", "prefill", "role prefill"},
	} {
		p := peers[peerauth.Role(c.cert)]
		p.Prefill, p.Decode = []string{"127.0.0.1:1"}, []string{"127.0.0.1:1"}
		cfg := roleConfig(t, 200, 64, 10, "", p)
		var out, errb bytes.Buffer
		code := run([]string{c.cmd, "--config", cfg, "--listen", "127.0.0.1:0"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), p.Cert) || !strings.Contains(errb.String(), c.has) ||
			!strings.Contains(errb.String(), "--role "+c.cmd) || strings.Contains(out.String(), "control on") {
			t.Errorf("%s with the %s certificate: exit %d, stdout %q, stderr %q; want a refusal naming the file, %q and the fix",
				c.cmd, c.cert, code, out.String(), errb.String(), c.has)
		}
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
