package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The keys scripts depend on (issue 3) must keep working.
const scriptConfig = `
model: path/to/model.gguf
context_len: 512
max_input_tokens: 512
kv:
  page_size: 16
  pages: 512
tenants:
  - name: acme
    api_keys: ["sk-acme-0123456789abcdef"]
`

func TestLoadScriptKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bulkhead.yaml")
	if err := os.WriteFile(path, []byte(scriptConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "path/to/model.gguf" || c.ContextLen != 512 || c.MaxInputTokens != 512 || c.KV.PageSize != 16 || c.KV.Pages != 512 {
		t.Fatalf("decoded %+v", c)
	}
	if len(c.Tenants) != 1 || c.Tenants[0].Name != "acme" || c.Tenants[0].APIKeys[0] != "sk-acme-0123456789abcdef" {
		t.Fatalf("tenants %+v", c.Tenants)
	}
	if c.Auth != AuthAPIKey {
		t.Fatalf("auth = %q with tenants configured, want api_key", c.Auth)
	}
	if c.Listen != DefaultListen || c.KV.Scrub != ScrubZero || c.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if c.Auth != AuthNone || c.Model != "" || c.KV.PageSize != DefaultPageSize || c.KV.Scrub != ScrubZero {
		t.Fatalf("Default() = %+v", c)
	}
	if err := c.validate(nil); err != nil {
		t.Fatalf("Default() does not validate: %v", err)
	}
	// An empty file is the default configuration.
	e, err := Parse(nil)
	if err != nil || e.Auth != AuthNone || e.Listen != DefaultListen {
		t.Fatalf("Parse(empty) = %+v, %v", e, err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown top-level key", "context_len: 512\nmax_tokens_in: 3\n", []string{"line 2", `unknown key "max_tokens_in"`, "top level"}},
		{"unknown nested key", "kv:\n  page_size: 16\n  pagez: 3\n", []string{"line 3", `unknown key "pagez"`, "kv"}},
		{"unknown tenant key", "tenants:\n  - name: a\n    api_keys: [k1]\n    keys: [x]\n", []string{"line 4", `unknown key "keys"`}},
		{"wrong type", "context_len: lots\n", []string{"line 1", "lots"}},
		{"input over context", "context_len: 256\nmax_input_tokens: 512\n", []string{"line 2", "max_input_tokens", "512", "256"}},
		{"pool too small", "context_len: 512\nkv:\n  page_size: 16\n  pages: 8\n", []string{"line 4", "kv.pages", "128 tokens", "512"}},
		{"duplicate key across tenants", "tenants:\n  - name: a\n    api_keys: [sk-same-key]\n  - name: b\n    api_keys: [sk-other, sk-same-key]\n",
			[]string{"line 5", "tenants[1].api_keys[1]", "same key as tenants[0].api_keys[0]"}},
		{"empty key", "tenants:\n  - name: a\n    api_keys: [\"\"]\n", []string{"tenants[0].api_keys[0]: is empty"}},
		{"no keys", "tenants:\n  - name: a\n", []string{"tenants[0].api_keys", "no API keys"}},
		{"duplicate tenant", "tenants:\n  - name: a\n    api_keys: [k1]\n  - name: a\n    api_keys: [k2]\n", []string{"line 4", "already the name of tenants[0]"}},
		{"auth none with tenants", "auth: none\ntenants:\n  - name: a\n    api_keys: [k1]\n", []string{"line 1", "auth", "require api_key"}},
		{"api_key without tenants", "auth: api_key\n", []string{"no tenants"}},
		{"bad scrub", "kv:\n  scrub: bleach\n", []string{"line 2", "kv.scrub", "bleach"}},
		{"bad kv dtype", "kv:\n  dtype: q8_0\n", []string{"line 2", "kv.dtype", "q8_0", "f16"}},
		{"bad kv memory", "kv:\n  memory: 2 gigs\n", []string{"line 2", "kv.memory", "gigs"}},
		{"kv memory and pages", "kv:\n  pages: 64\n  memory: 1GiB\n", []string{"line 3", "kv.memory", "kv.pages"}},
		{"share with unknown", "prefix_cache:\n  enabled: true\ntenants:\n  - name: a\n    api_keys: [k1]\n    share_prefix_cache_with: [zed]\n", []string{"line 6", `"zed"`}},
		{"sharing without cache", "tenants:\n  - name: a\n    api_keys: [k1]\n    prefix_group: org\n", []string{"prefix_cache.enabled"}},
		{"two documents", "context_len: 5\n---\ncontext_len: 6\n", []string{"more than one YAML document"}},
		{"duplicate yaml key", "context_len: 5\ncontext_len: 6\n", []string{"already defined"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// Errors about keys must never print the key.
func TestErrorsNeverShowKeys(t *testing.T) {
	const secret = "sk-very-secret-value-42"
	_, err := Parse([]byte("tenants:\n  - name: a\n    api_keys: [" + secret + "]\n  - name: b\n    api_keys: [" + secret + "]\n"))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v", err)
	}
	c, err := Parse([]byte("metrics_listen: 127.0.0.1:9464\ntenants:\n  - name: a\n    api_keys: [short]\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warnings()
	if len(w) != 1 || strings.Contains(w[0], "short") && !strings.Contains(w[0], "characters") {
		t.Fatalf("warnings %q", w)
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Parse([]byte("batch_tokens: -1\nmax_sequences: -2\nlog_level: loud\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"batch_tokens", "max_sequences", "log_level"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
}

func TestResolve(t *testing.T) {
	c := Default()
	if err := c.Resolve(512, 1280); err != nil {
		t.Fatal(err)
	}
	if c.ContextLen != 512 || c.MaxInputTokens != 512 || c.KV.Pages != 4*32 || c.PoolTokens() != 4*512 {
		t.Fatalf("resolved %+v", c)
	}
	c = Default()
	c.ContextLen = 1024
	if err := c.Resolve(512, 1280); err == nil || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("context_len over the model's: %v", err)
	}
	c = Default()
	c.KV.Pages = 31 // one page short of a 512-token request
	if err := c.Resolve(512, 1280); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("pool one page short: %v", err)
	}
	c = Default()
	c.KV.Pages = 32
	if err := c.Resolve(512, 1280); err != nil {
		t.Fatalf("pool exactly one context: %v", err)
	}

	// kv.memory: as many pages as fit. 1280 bytes per token (stories260K
	// at f32) × 16-token pages = 20 KiB a page.
	c = Default()
	c.KV.Memory = "1MiB"
	if err := c.Resolve(512, 1280); err != nil || c.KV.Pages != (1<<20)/(16*1280) {
		t.Fatalf("kv.memory 1MiB: %d pages, %v; want %d", c.KV.Pages, err, (1<<20)/(16*1280))
	}
	c = Default()
	c.KV.Memory = "1MiB"
	if err := c.Resolve(512, 640); err != nil || c.KV.Pages != (1<<20)/(16*640) { // f16: twice the pages
		t.Fatalf("kv.memory 1MiB at 640 bytes per token: %d pages, %v", c.KV.Pages, err)
	}
	c = Default()
	c.KV.Memory = "600KiB" // 30 pages, one full-context request needs 32
	if err := c.Resolve(512, 1280); err == nil || !strings.Contains(err.Error(), "needs 32 pages") || !strings.Contains(err.Error(), "600KiB") {
		t.Fatalf("kv.memory too small for one request: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "2GiB": 2 << 30, "512 MiB": 512 << 20, "1.5GB": 1500000000, "64kB": 64000, "3B": 3} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "0", "0.5", "2 gigs", "1e400GB", "NaNGB"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestPrefixNamespace(t *testing.T) {
	c, err := Parse([]byte(`
prefix_cache: {enabled: true}
tenants:
  - {name: a, api_keys: [ka]}
  - {name: b, api_keys: [kb], share_prefix_cache_with: [c]}
  - {name: c, api_keys: [kc]}
  - {name: d, api_keys: [kd], prefix_group: org}
  - {name: e, api_keys: [ke], prefix_group: org}
`))
	if err != nil {
		t.Fatal(err)
	}
	ns := func(n string) string { return c.PrefixNamespace(n) }
	if ns("a") != "tenant:a" {
		t.Errorf("a alone: %q", ns("a"))
	}
	if ns("b") != ns("c") || ns("b") == ns("a") || !strings.HasPrefix(ns("b"), "group:") {
		t.Errorf("b and c share: %q %q", ns("b"), ns("c"))
	}
	if ns("d") != "group:org" || ns("e") != "group:org" {
		t.Errorf("d, e in org: %q %q", ns("d"), ns("e"))
	}
	if ns("zzz") != "tenant:zzz" {
		t.Errorf("unknown: %q", ns("zzz"))
	}
	// A tenant named like a group cannot collide with it.
	if ns("org") == ns("d") {
		t.Error("tenant org shares group org's namespace")
	}
}

func TestExampleInDocsLoads(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Skip("docs/configuration.md not present")
	}
	// The first ```yaml block is the full example.
	s := string(data)
	i := strings.Index(s, "```yaml\n")
	if i < 0 {
		t.Fatal("no yaml example in docs/configuration.md")
	}
	s = s[i+len("```yaml\n"):]
	s = s[:strings.Index(s, "```")]
	if _, err := Parse([]byte(s)); err != nil {
		t.Fatalf("the documented example does not load: %v", err)
	}
}

// FuzzParseBytes: any string gives a positive size or an error, never a
// panic, and a size that parses is below the int64 limit.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"2GiB", "512 MiB", "1.5GB", "0", "-1KiB", "1e400GB", "NaNGB", "9223372036854775807", "0x10", " 7 B "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 1 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}

// FuzzParse: any file gives a configuration or an error, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "context_len: 512\nkv:\n  page_size: 16\n  pages: 512\n",
		"kv:\n  memory: 2GiB\n  dtype: f16\n",
		"tenants:\n  - name: acme\n    api_keys: [\"sk-acme-0123456789\"]\n    max_kv_pages: 4\n",
		"peers:\n  auth: mtls\n  prefill: [a:1]\n  decode: [b:2]\n",
		"a: &x [*x]\n", "---\n---\n", "kv: {pages: -1}\n", "context_len: 1e99\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && c == nil {
			t.Fatal("Parse returned neither a configuration nor an error")
		}
	})
}

// With tenants, /metrics leaves the API listener: it is served only on
// metrics_listen, and without one the operator is warned that there is
// none. Without tenants it stays on the API unless moved.
func TestMetricsListen(t *testing.T) {
	const tenants = "tenants:\n  - name: a\n    api_keys: [0123456789abcdef0]\n"
	for _, tc := range []struct {
		yaml     string
		onAPI    bool
		warnings int
	}{
		{"", true, 0},
		{"metrics_listen: 127.0.0.1:9464\n", false, 0},
		{tenants, false, 1},
		{"metrics_listen: 127.0.0.1:9464\n" + tenants, false, 0},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.MetricsOnAPI() != tc.onAPI || len(c.Warnings()) != tc.warnings {
			t.Errorf("%q: metrics on the API %v (want %v), warnings %q (want %d)", tc.yaml, c.MetricsOnAPI(), tc.onAPI, c.Warnings(), tc.warnings)
		}
	}
	for _, bad := range []string{"metrics_listen: 9464\n", "listen: 127.0.0.1:8080\nmetrics_listen: 127.0.0.1:8080\n"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "metrics_listen") {
			t.Errorf("%q: %v, want an error naming metrics_listen", bad, err)
		}
	}
}

// A --config that never ends (/dev/zero) is refused once it passes
// MaxFileBytes, instead of hanging startup while memory fills; one that
// ends, a pipe included, loads.
func TestLoadBoundsTheFile(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	done := make(chan error, 1)
	go func() { _, err := Load("/dev/zero"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "config /dev/zero: more than 64 MiB") {
			t.Fatalf("Load(/dev/zero) = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load(/dev/zero) still reading after 30s")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.WriteString(scriptConfig); w.Close() }()
	defer r.Close()
	if c, err := Load(fmt.Sprintf("/dev/fd/%d", r.Fd())); err != nil || c.ContextLen != 512 {
		t.Fatalf("a config from a pipe: %+v, %v", c, err)
	}
}
