package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Upper bounds of sizes, far above any sane setting, that keep the
// arithmetic and the up-front allocations they drive in range.
const (
	maxBatchTokens     = 1 << 20
	maxSequences       = 1 << 20
	maxQueue           = 1 << 20
	maxPageSize        = 1 << 20
	maxPages           = math.MaxInt32 // what kv.NewPool accepts
	maxTransferTimeout = 3600          // seconds
)

// minKeyLen is the shortest API key that draws no warning: shorter keys
// can be guessed. Short keys are allowed (tests and scripts use them).
const minKeyLen = 16

// Warnings returns advice about settings that are valid but unwise, such as
// short API keys. Like errors, warnings never contain a key.
func (c *Config) Warnings() []string {
	var out []string
	for i, t := range c.Tenants {
		for j, k := range t.APIKeys {
			if len(k) < minKeyLen {
				out = append(out, fmt.Sprintf("tenants[%d].api_keys[%d] (tenant %q) is %d characters; use at least %d random characters", i, j, t.Name, len(k), minKeyLen))
			}
		}
	}
	if c.KV.Scrub == ScrubOff {
		out = append(out, "kv.scrub is off: freed KV pages keep their previous owner's data")
	}
	if len(c.Tenants) > 0 && c.MetricsListen == "" {
		out = append(out, "metrics are not served: /metrics names every tenant's traffic, so it is kept off the API listener tenants reach; set metrics_listen (or --metrics-listen) to an address only your scraper can reach")
	}
	return out
}

// MetricsOnAPI reports whether /metrics belongs on the API listener: only
// when there is no metrics_listen and no tenant another could watch.
func (c *Config) MetricsOnAPI() bool { return c.MetricsListen == "" && len(c.Tenants) == 0 }

// validate checks c (defaults applied) and returns every problem found,
// each prefixed with its line in the file when root locates it.
func (c *Config) validate(root *yaml.Node) error {
	v := &validator{root: root}
	c.validateScalars(v)
	c.validateTenants(v)
	return errors.Join(v.errs...)
}

type validator struct {
	root *yaml.Node
	errs []error
}

// fail records a problem at path (dotted keys with [i] indices, such as
// "tenants[1].api_keys[0]").
func (v *validator) fail(path, format string, args ...any) {
	msg := path + ": " + fmt.Sprintf(format, args...)
	if line := lineOf(v.root, path); line > 0 {
		msg = "line " + strconv.Itoa(line) + ": " + msg
	}
	v.errs = append(v.errs, errors.New(msg))
}

func (c *Config) validateScalars(v *validator) {
	for _, f := range []struct {
		path string
		val  int
	}{
		{"threads", c.Threads}, {"context_len", c.ContextLen}, {"max_input_tokens", c.MaxInputTokens},
		{"kv.pages", c.KV.Pages}, {"prefix_cache.max_blocks", c.PrefixCache.MaxBlocks},
	} {
		if f.val < 0 {
			v.fail(f.path, "is %d; it must be 0 (the default) or positive", f.val)
		}
	}
	if c.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(c.MetricsListen); err != nil {
			v.fail("metrics_listen", "%q is not a host:port address: %v", c.MetricsListen, err)
		} else if c.MetricsListen == c.Listen && port != "0" {
			v.fail("metrics_listen", "is the API's listen address %q; it must be an address of its own", c.Listen)
		}
	}
	for _, f := range []struct {
		path string
		val  int
	}{{"batch_tokens", c.BatchTokens}, {"max_sequences", c.MaxSequences}, {"max_queue", c.MaxQueue}, {"kv.page_size", c.KV.PageSize}} {
		if f.val < 1 {
			v.fail(f.path, "is %d; it must be at least 1", f.val)
		}
	}
	// Upper bounds: each of these sizes an allocation made up front (the
	// engine's batch buffers, its queue, the pool's page table) or enters
	// arithmetic (pages × page_size, context_len + page_size) that must
	// not overflow.
	for _, f := range []struct {
		path string
		val  int
		max  int
	}{
		{"batch_tokens", c.BatchTokens, maxBatchTokens}, {"max_sequences", c.MaxSequences, maxSequences},
		{"max_queue", c.MaxQueue, maxQueue}, {"kv.page_size", c.KV.PageSize, maxPageSize}, {"kv.pages", c.KV.Pages, maxPages},
	} {
		if f.val > f.max {
			v.fail(f.path, "is %d; it must be at most %d", f.val, f.max)
		}
	}
	if c.MaxBodyBytes < 1024 {
		v.fail("max_body_bytes", "is %d; it must be at least 1024", c.MaxBodyBytes)
	}
	if c.ContextLen > 0 && c.MaxInputTokens > c.ContextLen {
		v.fail("max_input_tokens", "is %d but context_len is %d; a prompt can never be longer than the context", c.MaxInputTokens, c.ContextLen)
	}
	if c.ContextLen > 0 && c.KV.Pages > 0 && c.KV.PageSize > 0 && c.KV.Pages <= maxPages && c.KV.PageSize <= maxPageSize &&
		c.KV.Pages*c.KV.PageSize < c.ContextLen {
		// context_len has no upper bound of its own (Resolve holds it to
		// the model's), so the page count rounds up without adding to it.
		v.fail("kv.pages", "is %d pages of %d tokens (%d tokens) but one full-context request needs %d tokens (%d pages)",
			c.KV.Pages, c.KV.PageSize, c.KV.Pages*c.KV.PageSize, c.ContextLen, (c.ContextLen-1)/c.KV.PageSize+1)
	}
	if !slices.Contains([]string{ScrubZero, ScrubPoison, ScrubOff}, c.KV.Scrub) {
		v.fail("kv.scrub", "is %q; want zero, poison or off", c.KV.Scrub)
	}
	if c.KV.Memory != "" {
		if _, err := ParseBytes(c.KV.Memory); err != nil {
			v.fail("kv.memory", "%v", err)
		}
		if c.KV.Pages != 0 {
			v.fail("kv.memory", "is set together with kv.pages; set one of them")
		}
	}
	if !slices.Contains([]string{"f32", "f16"}, c.KV.DType) {
		v.fail("kv.dtype", "is %q; want f32 or f16", c.KV.DType)
	}
	if !slices.Contains(logLevels, c.LogLevel) {
		v.fail("log_level", "is %q; want one of %s", c.LogLevel, strings.Join(logLevels, ", "))
	}
	switch c.Peers.Auth {
	case "":
	case PeerAuthMTLS:
		if c.Peers.CA == "" || c.Peers.Cert == "" || c.Peers.Key == "" {
			v.fail("peers.auth", "is mtls but peers.ca, peers.cert and peers.key are not all set")
		}
	case PeerAuthPSK:
		if c.Peers.PSKFile == "" {
			v.fail("peers.auth", "is psk but peers.psk_file is not set")
		}
	default:
		v.fail("peers.auth", "is %q; want mtls or psk", c.Peers.Auth)
	}
	if c.Peers.FrameBytes < 4096 || c.Peers.FrameBytes > 16<<20 {
		v.fail("peers.frame_bytes", "is %d; want 4096 to 16777216", c.Peers.FrameBytes)
	}
	if c.Peers.Window < 1 || c.Peers.Window > 1024 {
		v.fail("peers.window", "is %d; want 1 to 1024", c.Peers.Window)
	}
	if c.Peers.TransferTimeout < 1 || c.Peers.TransferTimeout > maxTransferTimeout {
		// Above the bound a reservation's lease is as good as never, and
		// far above it the deadline overflows time.Duration.
		v.fail("peers.transfer_timeout_s", "is %d; want 1 to %d", c.Peers.TransferTimeout, maxTransferTimeout)
	}
	switch c.Auth {
	case AuthNone:
		if len(c.Tenants) > 0 {
			v.fail("auth", "is none but %d tenants are configured; tenants require api_key authentication (remove auth or the tenants)", len(c.Tenants))
		}
	case AuthAPIKey:
		if len(c.Tenants) == 0 {
			v.fail("auth", "is api_key but no tenants are configured; add tenants with api_keys")
		}
	default:
		v.fail("auth", "is %q; want none or api_key", c.Auth)
	}
}

func (c *Config) validateTenants(v *validator) {
	names := map[string]int{}
	keys := map[string]string{} // key → "tenants[i].api_keys[j]" of its first use
	for i, t := range c.Tenants {
		at := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			v.fail(at+".name", "is missing; every tenant needs a name")
		case !validName(t.Name):
			v.fail(at+".name", "is %q; use letters, digits, '.', '_' and '-' only", t.Name)
		default:
			if j, dup := names[t.Name]; dup {
				v.fail(at+".name", "%q is already the name of tenants[%d]", t.Name, j)
			}
			names[t.Name] = i
		}
		if len(t.APIKeys) == 0 {
			v.fail(at+".api_keys", "tenant %q has no API keys; it could never be reached", t.Name)
		}
		for j, k := range t.APIKeys {
			kp := fmt.Sprintf("%s.api_keys[%d]", at, j)
			switch {
			case strings.TrimSpace(k) == "":
				v.fail(kp, "is empty")
			case k != strings.TrimSpace(k) || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f }):
				v.fail(kp, "contains whitespace or a control character, which an Authorization header cannot carry")
			default:
				// The message names both places, never the key itself.
				if first, dup := keys[k]; dup {
					v.fail(kp, "is the same key as %s; a key must identify exactly one tenant", first)
				} else {
					keys[k] = kp
				}
			}
		}
		for _, f := range []struct {
			name string
			val  int
		}{{"max_concurrent_requests", t.MaxConcurrentRequests}, {"max_kv_pages", t.MaxKVPages}, {"max_cached_blocks", t.MaxCachedBlocks}} {
			if f.val < 0 {
				v.fail(at+"."+f.name, "is %d; it must be 0 (unlimited) or positive", f.val)
			}
		}
		if t.PrefixGroup != "" && !validName(t.PrefixGroup) {
			v.fail(at+".prefix_group", "is %q; use letters, digits, '.', '_' and '-' only", t.PrefixGroup)
		}
	}
	for i, t := range c.Tenants {
		for j, o := range t.SharePrefixCacheWith {
			if _, ok := names[o]; !ok {
				v.fail(fmt.Sprintf("tenants[%d].share_prefix_cache_with[%d]", i, j), "names %q, which is not a configured tenant", o)
			} else if o == t.Name {
				v.fail(fmt.Sprintf("tenants[%d].share_prefix_cache_with[%d]", i, j), "names the tenant itself")
			}
		}
	}
	if (c.hasSharing()) && !c.PrefixCache.Enabled {
		v.fail("prefix_cache.enabled", "is false but tenants configure prefix-cache sharing; enable the cache or remove the sharing")
	}
	c.checkGroupConflicts(v)
}

func (c *Config) hasSharing() bool {
	for _, t := range c.Tenants {
		if t.PrefixGroup != "" || len(t.SharePrefixCacheWith) > 0 {
			return true
		}
	}
	return false
}

// checkGroupConflicts rejects tenants joined by share_prefix_cache_with,
// directly or through other tenants, whose prefix_group settings
// disagree: the shared namespace would be ambiguous, and resolving it
// would merge both groups into one.
func (c *Config) checkGroupConflicts(v *validator) {
	parent := make([]int, len(c.Tenants))
	index := map[string]int{}
	for i, t := range c.Tenants {
		parent[i] = i
		if _, dup := index[t.Name]; !dup {
			index[t.Name] = i
		}
	}
	var find func(int) int
	find = func(x int) int {
		if parent[x] != x {
			parent[x] = find(parent[x])
		}
		return parent[x]
	}
	for i, t := range c.Tenants {
		for _, o := range t.SharePrefixCacheWith {
			if j, ok := index[o]; ok {
				parent[find(j)] = find(i)
			}
		}
	}
	type named struct{ tenant, group string }
	groups := map[int][]named{} // component root -> its distinct prefix_groups, first holder of each
	for _, t := range c.Tenants {
		if t.PrefixGroup == "" {
			continue
		}
		r := find(index[t.Name])
		if !slices.ContainsFunc(groups[r], func(n named) bool { return n.group == t.PrefixGroup }) {
			groups[r] = append(groups[r], named{t.Name, t.PrefixGroup})
		}
	}
	reported := map[int]bool{}
	for i, t := range c.Tenants {
		r := find(i)
		if len(t.SharePrefixCacheWith) == 0 || len(groups[r]) < 2 || reported[r] {
			continue
		}
		reported[r] = true
		var names []string
		for _, n := range groups[r] {
			names = append(names, fmt.Sprintf("%q (prefix_group %q)", n.tenant, n.group))
		}
		v.fail(fmt.Sprintf("tenants[%d].share_prefix_cache_with", i), "joins %s into one shared cache; a shared cache has one group",
			strings.Join(names, " and "))
	}
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return s != "" && len(s) <= 64
}

// lineOf finds the line of path ("a.b[2].c") in a decoded YAML document,
// or 0 when it is not there (a default, for instance).
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n == nil || n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return 0
	}
	n = n.Content[0]
	line := 0
	for _, part := range strings.Split(path, ".") {
		key, idx := part, -1
		if b := strings.IndexByte(part, '['); b >= 0 {
			key = part[:b]
			idx, _ = strconv.Atoi(strings.TrimSuffix(part[b+1:], "]"))
		}
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				line = n.Content[i].Line
				n = n.Content[i+1]
				found = true
				break
			}
		}
		if !found {
			return line
		}
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}
