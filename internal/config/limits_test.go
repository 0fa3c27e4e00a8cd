package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A prefix_group and an unnamed sharing group must never resolve to the
// same namespace: gamma configures nothing that joins it to alpha and
// beta, so a cache hit must never cross between them.
func TestPrefixNamespaceGroupNamedLikeSharingRoot(t *testing.T) {
	c, err := Parse([]byte(`
prefix_cache: {enabled: true}
tenants:
  - {name: alpha, api_keys: [ka], share_prefix_cache_with: [beta]}
  - {name: beta, api_keys: [kb]}
  - {name: gamma, api_keys: [kc], prefix_group: alpha}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefixNamespace("alpha") != c.PrefixNamespace("beta") {
		t.Fatalf("alpha and beta share: %q %q", c.PrefixNamespace("alpha"), c.PrefixNamespace("beta"))
	}
	if g, a := c.PrefixNamespace("gamma"), c.PrefixNamespace("alpha"); g == a {
		t.Fatalf("gamma (prefix_group alpha) shares namespace %q with tenants alpha and beta", g)
	}
}

// Tenants joined through a third one that names two different
// prefix_groups are refused: the shared cache would have two names, and
// the resolution silently merged both groups into one.
func TestGroupConflictThroughSharing(t *testing.T) {
	_, err := Parse([]byte(`
prefix_cache: {enabled: true}
tenants:
  - {name: a, api_keys: [ka], prefix_group: x}
  - {name: b, api_keys: [kb], prefix_group: y}
  - {name: c, api_keys: [kc], share_prefix_cache_with: [a, b]}
  - {name: d, api_keys: [kd], prefix_group: x}
`))
	if err == nil {
		t.Fatal("a config joining prefix_groups x and y through tenant c was accepted")
	}
	for _, w := range []string{"share_prefix_cache_with", `"x"`, `"y"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %s", err, w)
		}
	}
}

// Sizes that validation accepts must not overflow or crash later: each
// of these used to pass Parse (and page_size also Resolve, with a pool of
// zero pages, which made preflight divide by zero).
func TestHugeValuesRefused(t *testing.T) {
	cases := []struct{ yaml, key string }{
		{"kv:\n  page_size: 9223372036854775807\n", "kv.page_size"},
		{"kv:\n  pages: 4294967296\n", "kv.pages"},
		{"batch_tokens: 9223372036854775807\n", "batch_tokens"},
		{"max_sequences: 1099511627776\n", "max_sequences"},
		{"max_queue: 1099511627776\n", "max_queue"},
		{"peers:\n  transfer_timeout_s: 10000000000\n", "peers.transfer_timeout_s"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.yaml))
		if err == nil {
			t.Errorf("%q: accepted", tc.yaml)
			continue
		}
		if !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: error %q does not name %s and its line", tc.yaml, err, tc.key)
		}
	}
	// The largest accepted page size still resolves to a pool that holds
	// a full-context request.
	c, err := Parse([]byte("kv:\n  page_size: 1048576\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(512, 1280); err != nil || c.KV.Pages < 1 || c.PoolTokens() < c.ContextLen {
		t.Fatalf("page_size 1048576: %d pages, %v", c.KV.Pages, err)
	}
}

// A context_len near the int limit is too long for the pool; the message
// says how many pages it would need, not a count that wrapped negative.
func TestHugeContextLenPages(t *testing.T) {
	_, err := Parse([]byte("context_len: 9223372036854775807\nkv:\n  pages: 1\n  page_size: 16\n"))
	if err == nil || !strings.Contains(err.Error(), "(576460752303423488 pages)") {
		t.Fatalf("error %v, want the pages a full-context request needs", err)
	}
}

// An unknown key under peers names the section as the file spells it.
func TestUnknownPeersKey(t *testing.T) {
	_, err := Parse([]byte("peers:\n  window: 8\n  windw: 9\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown key "windw" in peers`) {
		t.Fatalf("error %v", err)
	}
}

// A key an Authorization header cannot carry could never authenticate.
func TestKeyWithControlCharacter(t *testing.T) {
	_, err := Parse([]byte("tenants:\n  - name: a\n    api_keys: [\"sk-abc\\u0001def0123456789\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "tenants[0].api_keys[0]") {
		t.Fatalf("error %v", err)
	}
}

// PrefixNamespace is called for every tenant at startup; it used to scan
// every tenant once per tenant of its group, so a thousand tenants sharing
// one cache took minutes to start. One call over 5000 tenants took
// seconds; it now takes milliseconds, far under the bound.
func TestPrefixNamespaceManyTenants(t *testing.T) {
	const n = 5000
	var b strings.Builder
	b.WriteString("prefix_cache: {enabled: true}\ntenants:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: t%d, api_keys: [k%d], share_prefix_cache_with: [t%d]}\n", i, i, (i+1)%n)
	}
	b.WriteString("  - {name: last, api_keys: [kl], share_prefix_cache_with: [t0], prefix_group: org}\n")
	c, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ns := c.PrefixNamespace("t17")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("PrefixNamespace over %d tenants took %v", n, d)
	}
	if ns != "group:org" {
		t.Errorf("t17 is in namespace %q, want group:org", ns)
	}
	// What the engine does: one namespace per request, from a resolver
	// made once. Resolving the sharing per call made this n passes over
	// n tenants.
	start = time.Now()
	namespace := c.PrefixNamespaces()
	for i := 0; i < n; i++ {
		if ns := namespace(fmt.Sprintf("t%d", i)); ns != "group:org" {
			t.Fatalf("t%d is in namespace %q, want group:org", i, ns)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d namespace lookups took %v", n, d)
	}
	if ns := namespace("nobody"); ns != "tenant:nobody" {
		t.Errorf("an unknown tenant is in %q, want tenant:nobody", ns)
	}
}
