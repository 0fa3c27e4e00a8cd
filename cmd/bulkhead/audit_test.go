package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// auditConfig is a server with a small context, a pool small enough that
// eight requests in flight contend for it, and the prefix cache on; the
// %s is extra YAML for acme and globex.
const auditConfig = `
context_len: 256
max_input_tokens: 200
batch_tokens: 64
max_sequences: 16
kv:
  page_size: 16
  pages: 64
  scrub: poison
prefix_cache:
  enabled: true
tenants:
  - name: acme
    api_keys: ["sk-audit-acme-0123456789"]%[1]s
  - name: globex
    api_keys: ["sk-audit-globex-0123456789"]%[1]s
  - name: hooli
    api_keys: ["sk-audit-hooli-0123456789"]
`

var auditKeys = map[string]string{"acme": "sk-audit-acme-0123456789", "globex": "sk-audit-globex-0123456789", "hooli": "sk-audit-hooli-0123456789"}

func startAuditServe(t *testing.T, extra string) *process {
	return startBulkhead(t, "serve", "--config", writeConfig(t, fmt.Sprintf(auditConfig, extra)))
}

// auditArgs are the flags of an audit of the server at base.
func auditArgs(base string, extra ...string) []string {
	a := []string{"--target", base, "--context-len", "256", "--rounds", "2", "--concurrency", "8", "--seed", "3", "--timeout", "30s"}
	for _, tn := range []string{"acme", "globex", "hooli"} {
		a = append(a, "--key", tn+"="+auditKeys[tn])
	}
	return append(a, extra...)
}

// noKeys fails the test if any output holds an API key.
func noKeys(t *testing.T, out ...string) {
	t.Helper()
	for _, s := range out {
		for _, k := range auditKeys {
			if strings.Contains(s, k) {
				t.Fatalf("output holds an API key:\n%s", s)
			}
		}
	}
}

// TestAudit runs `bulkhead audit` against a real `bulkhead serve` with
// three tenants. The server is built with buildTags, so under
// -tags bulkhead_placeholder it has the placeholder bug of DESIGN.md
// section 1, and "every check passes" must fail on the over-limit check.
func TestAudit(t *testing.T) {
	p := startAuditServe(t, "")
	args := func(extra ...string) []string { return auditArgs(p.base, extra...) }

	t.Run("every check passes", func(t *testing.T) {
		var stdout, stderr strings.Builder
		start := time.Now()
		err := runAudit(args(), &stdout, &stderr)
		t.Logf("audit took %v", time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("audit failed: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		out := stdout.String()
		t.Logf("report:\n%s", out)
		for _, id := range []string{"over-limit", "solo-equivalence", "canaries", "error-echo", "prefix-cache"} {
			if !strings.Contains(out, "PASS  "+id+" ") {
				t.Errorf("check %s did not pass:\n%s", id, out)
			}
		}
		if !strings.Contains(out, "PASS: 5 checks passed, 0 failed, 0 warned, 0 skipped") || !strings.Contains(out, "acme, globex, hooli") {
			t.Errorf("report:\n%s", out)
		}
		// The server caches prefixes and says so, so the prefix-cache
		// check saw something.
		if !strings.Contains(out, "the same tenant's repeats hit the cache") {
			t.Errorf("no same-tenant prefix-cache hit was visible:\n%s", out)
		}
		noKeys(t, out, stderr.String())
	})

	t.Run("json", func(t *testing.T) {
		var stdout, stderr strings.Builder
		if err := runAudit(args("--json", "--rounds", "1"), &stdout, &stderr); err != nil {
			t.Fatalf("audit failed: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		var rep struct {
			Status  string   `json:"status"`
			Tenants []string `json:"tenants"`
			Checks  []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout.String())
		}
		if rep.Status != "PASS" || len(rep.Checks) != 5 || len(rep.Tenants) != 3 {
			t.Errorf("report: %+v", rep)
		}
		for i, id := range []string{"over-limit", "solo-equivalence", "canaries", "error-echo", "prefix-cache"} {
			if i >= len(rep.Checks) || rep.Checks[i].ID != id || rep.Checks[i].Status != "PASS" {
				t.Errorf("check %d: want %s PASS in %+v", i, id, rep.Checks)
			}
		}
		noKeys(t, stdout.String(), stderr.String())
	})

	t.Run("refused key", func(t *testing.T) {
		a := args()
		for i, v := range a {
			if strings.HasPrefix(v, "globex=") {
				a[i] = "globex=sk-globex-not-the-key"
			}
		}
		var stdout, stderr strings.Builder
		code := run(append([]string{"audit"}, a...), &stdout, &stderr)
		msg := stderr.String()
		t.Logf("stderr: %s", msg)
		if code != 1 || !strings.Contains(msg, `refused tenant "globex"'s API key`) || !strings.Contains(msg, "401") {
			t.Fatalf("exit %d, stderr %q; want 1 and a 401 for globex", code, msg)
		}
		if strings.Contains(stdout.String(), "FAIL") || strings.Contains(msg, "canar") {
			t.Errorf("a refused key was reported as a finding:\n%s%s", stdout.String(), msg)
		}
		if strings.Contains(msg, "sk-globex-not-the-key") {
			t.Errorf("the refused key was printed: %s", msg)
		}
		noKeys(t, stdout.String(), msg)
	})

	t.Run("usage", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--target", p.base, "--key", "acme=" + auditKeys["acme"]}, "at least two tenants, got 1"},
			{[]string{"--key", "a=sk-key-of-a", "--key", "b=sk-key-of-b"}, "--target is required"},
			{[]string{"--target", p.base, "--key", "a=sk-key-of-a", "--key", "a=sk-key-of-b"}, `tenant "a" is given twice`},
			{[]string{"--target", p.base, "--key", "a=sk-key-of-a", "--key", "b c=sk-key-of-b"}, `tenant name "b c"`},
			{[]string{"--target", p.base, "--key", "a=sk-key-of-a", "--key", "b=sk-key-of-b", "--rounds", "0"}, "--rounds must be 1 to 1000, got 0"},
		} {
			var stdout, stderr strings.Builder
			if code := run(append([]string{"audit"}, c.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
			}
		}
	})
}

// TestAuditCatchesSharedPrefixCache: two tenants configured to share one
// prefix-cache namespace can see each other's cache hits, and the audit
// says so: the second tenant's very first request reports cached tokens
// on the prefix only the first had sent.
func TestAuditCatchesSharedPrefixCache(t *testing.T) {
	p := startAuditServe(t, "\n    prefix_group: shared")
	var stdout, stderr strings.Builder
	err := runAudit(auditArgs(p.base, "--rounds", "1"), &stdout, &stderr)
	out := stdout.String()
	if err == nil || err.Error() != "1 of 5 checks failed: prefix-cache" {
		t.Fatalf("audit error %v, want only prefix-cache to fail:\n%s%s", err, out, stderr.String())
	}
	if !strings.Contains(out, "FAIL  prefix-cache") || !strings.Contains(out, "globex probe p0") || !strings.Contains(out, "only acme had sent this prefix") {
		t.Errorf("report:\n%s", out)
	}
	noKeys(t, out, stderr.String())
}

// TestAuditDisagg runs the audit through a router in front of one prefill
// and one decode server, the KV of every request crossing a real TCP
// connection: every check passes, and afterwards neither pool holds a page.
func TestAuditDisagg(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	peers := makePeers(t)
	pair := startPair(t, peers, roleConfig(t, 200, 64, 10, "", peers[peerauth.RolePrefill]), roleConfig(t, 200, 64, 10, "", peers[peerauth.RoleDecode]), 200, 10, "")
	args := []string{"--target", pair.router.base, "--context-len", "256", "--rounds", "1", "--seed", "5", "--timeout", "30s"}
	for _, tn := range []string{"acme", "globex", "hooli"} {
		args = append(args, "--key", tn+"="+tenantKeys[tn])
	}
	var stdout, stderr strings.Builder
	if err := runAudit(args, &stdout, &stderr); err != nil {
		t.Fatalf("audit through the router failed: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, id := range []string{"over-limit", "solo-equivalence", "canaries", "error-echo"} {
		if !strings.Contains(out, "PASS  "+id+" ") {
			t.Errorf("check %s did not pass:\n%s", id, out)
		}
	}
	pair.d.waitNoLeak(t, "decode after the audit")
	pair.p.waitNoLeak(t, "prefill after the audit")
}

// TestAuditKeyFlags: a bad --key is a usage error that never prints the
// key, and keys that cannot make a meaningful audit are refused: one key
// for two tenants (the endpoint would see one tenant), or a key too short
// to remove from what the endpoint sends back without also removing parts
// of ordinary text and of canary markers.
func TestAuditKeyFlags(t *testing.T) {
	const secret = "sk-supersecret-0123456789"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", secret, "--key", "b=sk-other-0123456789"}, "want NAME=APIKEY"},
		{[]string{"--key", secret + "==", "--key", "b=sk-other-0123456789"}, "want NAME=APIKEY"}, // base64 padding
		{[]string{"--key", "a=" + secret, "--key", "a=" + secret + "x"}, `tenant "a" is given twice`},
		{[]string{"--key", "a=" + secret, "--key", "b=" + secret}, `tenants "a" and "b" have the same API key`},
		{[]string{"--key", "a=" + secret, "--key", "b=ab12"}, `tenant "b"'s API key is 4 characters`},
	} {
		var stdout, stderr strings.Builder
		args := append([]string{"audit", "--target", "http://127.0.0.1:1"}, c.args...)
		code := run(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
		for _, k := range []string{secret, "ab12"} {
			if strings.Contains(stdout.String()+stderr.String(), k) {
				t.Errorf("%v: the output holds a key:\n%s%s", c.args, stdout.String(), stderr.String())
			}
		}
	}
}
