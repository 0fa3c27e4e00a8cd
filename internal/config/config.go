package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Auth modes.
const (
	// AuthNone serves a single implicit tenant (LocalTenant) without
	// credentials: for local use only. It is the default when no tenants are
	// configured.
	AuthNone = "none"
	// AuthAPIKey requires `Authorization: Bearer KEY` with a key listed under
	// a tenant. It is the default, and the only accepted mode, when tenants
	// are configured.
	AuthAPIKey = "api_key"
)

// LocalTenant is the tenant every request belongs to under AuthNone.
const LocalTenant = "local"

// KV scrub modes: what a freed page is filled with before reuse.
const (
	ScrubZero   = "zero"   // zeroed (the default)
	ScrubPoison = "poison" // a pattern naming the previous owner, so a stale read is detectable
	ScrubOff    = "off"    // left as is: for measuring the cost of scrubbing only
)

// Log levels.
var logLevels = []string{"debug", "info", "warn", "error"}

// Config is the whole configuration file. Zero numeric values mean "the
// default", documented on each field and in docs/configuration.md.
type Config struct {
	// Model is the path of a GGUF or llama2.c model file; empty serves the
	// embedded stories260K model.
	Model string `yaml:"model"`
	// Tokenizer is the llama2.c tokenizer file that a llama2.c Model needs
	// (GGUF files carry their own).
	Tokenizer string `yaml:"tokenizer"`
	// ModelName is the id clients send as "model" and /v1/models lists;
	// empty derives it from the model (the embedded model is "stories260K").
	ModelName string `yaml:"model_name"`
	// Listen is the HTTP listen address (default 127.0.0.1:8080). The serve
	// command's --listen flag overrides it.
	Listen string `yaml:"listen"`
	// MetricsListen is where /metrics is served, apart from the API: an
	// address only the operator's scraper can reach. /metrics names every
	// tenant with its request and token counts, latencies and cache use,
	// so with tenants configured it is never served on the API listener;
	// without tenants (no auth, one anonymous user) and without
	// MetricsListen it stays on the API listener. A prefill or decode
	// server serves /metrics on its control listener only to peer
	// certificates, and here, when set, to the scraper without one. The
	// --metrics-listen flag overrides it.
	MetricsListen string `yaml:"metrics_listen"`
	// Threads is the number of compute threads; 0 uses one per GOMAXPROCS
	// (the container's CPU limit), and more than GOMAXPROCS are cut to it.
	Threads int `yaml:"threads"`
	// ContextLen bounds prompt plus generated tokens; 0 uses the model's
	// context length. It may not exceed the model's.
	ContextLen int `yaml:"context_len"`
	// MaxInputTokens bounds the prompt alone; 0 means ContextLen.
	MaxInputTokens int `yaml:"max_input_tokens"`
	// BatchTokens is the most tokens (prefill chunks plus decode tokens) the
	// engine processes in one step (default 256).
	BatchTokens int `yaml:"batch_tokens"`
	// MaxSequences is the most sequences running at once; more wait in the
	// queue (default 64).
	MaxSequences int `yaml:"max_sequences"`
	// MaxQueue is the most requests waiting to start; beyond it requests get
	// 503 (default 1024).
	MaxQueue int `yaml:"max_queue"`
	// MaxBodyBytes bounds an HTTP request body (default 1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// Auth is AuthNone or AuthAPIKey; empty picks AuthAPIKey when tenants
	// are configured and AuthNone otherwise.
	Auth        string      `yaml:"auth"`
	KV          KV          `yaml:"kv"`
	PrefixCache PrefixCache `yaml:"prefix_cache"`
	Tenants     []Tenant    `yaml:"tenants"`

	// Peers configures disaggregated serving: how prefill, decode and
	// router processes authenticate each other, and which peers a router
	// uses. Ignored by serve.
	Peers Peers `yaml:"peers"`
}

// Peers is the disaggregated deployment: peer authentication, the
// router's peer lists and the KV transfer's limits.
type Peers struct {
	// Auth is how peers prove who they are: "mtls" (mutual TLS with the
	// operator's CA; the default when ca is set), where each certificate
	// names the one role its holder may act as and every endpoint checks
	// it, or "psk" (a pre-shared key, also TLS 1.3, encrypted and
	// authenticated), where every holder of the key is every role: psk
	// gives no role separation.
	Auth string `yaml:"auth"`
	// CA, Cert and Key are PEM files for mtls: the CA that signs every
	// peer, and this process's certificate (which must name this
	// process's role: `bulkhead certs --role`) and key.
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// PSKFile holds the pre-shared key for psk (at least 32 bytes).
	PSKFile string `yaml:"psk_file"`
	// Prefill and Decode are the control addresses (host:port) of the
	// peers a router may use. A router never sends to anyone else.
	Prefill []string `yaml:"prefill"`
	Decode  []string `yaml:"decode"`
	// FrameBytes bounds one KV transfer frame (default 512 KiB); Window
	// bounds the frames in flight per transfer (default 8).
	FrameBytes int `yaml:"frame_bytes"`
	Window     int `yaml:"window"`
	// TransferTimeout bounds one whole transfer, reservation to
	// acknowledgement, in seconds (default 30); a reservation whose
	// transfer does not complete by then is freed.
	TransferTimeout int `yaml:"transfer_timeout_s"`
}

// Peer auth modes.
const (
	PeerAuthMTLS = "mtls"
	PeerAuthPSK  = "psk"
)

// KV sizes the paged KV pool.
type KV struct {
	// PageSize is tokens per page (default 16).
	PageSize int `yaml:"page_size"`
	// Pages is the number of pages in the pool; 0 sizes the pool for four
	// full-context sequences (Resolve), or from Memory when that is set.
	Pages int `yaml:"pages"`
	// Memory sizes the pool by bytes instead of pages ("2GiB", "512MiB",
	// "1.5GB"): as many pages as fit, given the model's layers, KV
	// dimension and DType (an f16 pool holds twice the tokens of an f32 one
	// in the same memory). Set at most one of Pages and Memory.
	Memory string `yaml:"memory"`
	// Scrub is ScrubZero (default), ScrubPoison or ScrubOff.
	Scrub string `yaml:"scrub"`
	// DType is the element type of cached keys and values: "f32" (default:
	// attention sees exactly what the model computed, and greedy output
	// matches the reference byte for byte) or "f16" (llama.cpp's default:
	// half the memory, so twice the tokens for the same pages' bytes, and
	// half the bytes attention reads and a transfer moves). A prefill and
	// a decode server must use the same type.
	DType string `yaml:"dtype"`
}

// PrefixCache configures the tenant-scoped prefix cache.
type PrefixCache struct {
	// Enabled turns the cache on (default off).
	Enabled bool `yaml:"enabled"`
	// MaxBlocks bounds cached blocks across all tenants; 0 lets the cache use
	// pages no running sequence needs.
	MaxBlocks int `yaml:"max_blocks"`
}

// Tenant is one customer: its keys and its limits. A zero limit means
// unlimited (bounded only by the server-wide limits).
type Tenant struct {
	Name    string   `yaml:"name"`
	APIKeys []string `yaml:"api_keys"`
	// MaxConcurrentRequests bounds the tenant's requests queued or running;
	// beyond it requests get 429.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`
	// MaxKVPages bounds the KV pages the tenant's sequences hold at once.
	MaxKVPages int `yaml:"max_kv_pages"`
	// MaxCachedBlocks bounds the tenant's blocks in the prefix cache.
	MaxCachedBlocks int `yaml:"max_cached_blocks"`
	// PrefixGroup names a prefix-cache namespace shared by every tenant with
	// the same group. Empty: the tenant's own namespace.
	PrefixGroup string `yaml:"prefix_group"`
	// SharePrefixCacheWith lists tenants this one shares its prefix cache
	// namespace with. Sharing is symmetric and transitive: the tenants form
	// one group (see PrefixNamespace).
	SharePrefixCacheWith []string `yaml:"share_prefix_cache_with"`
}

// Defaults for zero fields.
const (
	DefaultListen       = "127.0.0.1:8080"
	DefaultBatchTokens  = 256
	DefaultMaxSequences = 64
	DefaultMaxQueue     = 1024
	DefaultMaxBodyBytes = 1 << 20
	DefaultPageSize     = 16
	DefaultLogLevel     = "info"
	// DefaultFrameBytes and DefaultWindow shape a KV transfer: 512 KiB
	// frames, 8 in flight, so 4 MiB of KV per transfer in flight at most
	// (as 256 KiB x 16 was). On loopback a 512 KiB frame moved KV about
	// 30% faster than a 256 KiB one (half the per-frame reads, writes and
	// credits) and faster than 1 MiB (a 512 KiB frame is still in a
	// core's L2 when it is checksummed and copied); see
	// internal/transfer/bench_test.go, which benches these defaults.
	DefaultFrameBytes = 512 << 10
	DefaultWindow     = 8
)

// Default returns the configuration used when no file is given: the
// embedded model on localhost without authentication.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.BatchTokens == 0 {
		c.BatchTokens = DefaultBatchTokens
	}
	if c.MaxSequences == 0 {
		c.MaxSequences = DefaultMaxSequences
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.KV.PageSize == 0 {
		c.KV.PageSize = DefaultPageSize
	}
	if c.Peers.FrameBytes == 0 {
		c.Peers.FrameBytes = DefaultFrameBytes
	}
	if c.Peers.Window == 0 {
		c.Peers.Window = DefaultWindow
	}
	if c.Peers.TransferTimeout == 0 {
		c.Peers.TransferTimeout = 30
	}
	if c.Peers.Auth == "" && c.Peers.CA != "" {
		c.Peers.Auth = PeerAuthMTLS
	}
	if c.KV.Scrub == "" {
		c.KV.Scrub = ScrubZero
	}
	if c.KV.DType == "" {
		c.KV.DType = "f32"
	}
	if c.Auth == "" {
		c.Auth = AuthNone
		if len(c.Tenants) > 0 {
			c.Auth = AuthAPIKey
		}
	}
}

// Load reads, decodes and validates the file at path. Unknown keys are
// errors that name the key and its line; every validation problem is
// reported, not just the first.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	// Read through a bound, not to the end: a path that never ends
	// (/dev/zero, a pipe left open) would otherwise hang startup while
	// memory fills. A pipe that ends is fine (--config <(...)).
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config %s: more than %d MiB; is it the configuration file?", path, MaxFileBytes>>20)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// MaxFileBytes bounds the configuration file Load reads: far above any
// real one (ten thousand tenants with their keys take a few MiB).
const MaxFileBytes = 64 << 20

// Parse decodes and validates a configuration held in memory, as Load.
func Parse(data []byte) (*Config, error) {
	c := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, cleanYAMLError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document; use one")
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // decoded above; only used for line numbers
	c.applyDefaults()
	if err := c.validate(&root); err != nil {
		return nil, err
	}
	return c, nil
}

var notFoundRE = regexp.MustCompile(`line (\d+): field (\S+) not found in type config\.(\w+)`)

// cleanYAMLError rewrites yaml's "field x not found in type config.KV" as
// "line 5: unknown key "x" in kv", which is what the operator wrote.
func cleanYAMLError(err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	sections := map[string]string{"Config": "the top level", "KV": "kv", "PrefixCache": "prefix_cache", "Tenant": "a tenant", "Peers": "peers"}
	msg = notFoundRE.ReplaceAllStringFunc(msg, func(m string) string {
		s := notFoundRE.FindStringSubmatch(m)
		where := sections[s[3]]
		if where == "" {
			where = s[3]
		}
		return fmt.Sprintf("line %s: unknown key %q in %s", s[1], s[2], where)
	})
	return errors.New(msg)
}

// PrefixNamespace returns the prefix-cache namespace of tenant name:
// "tenant:NAME", or "group:GROUP" when it shares its cache. Tenants
// joined by share_prefix_cache_with (in either direction, transitively)
// get one group named "+" and the alphabetically first member (a name no
// prefix_group can take, so such a group never meets a prefix_group
// named like that member), unless one of them sets prefix_group. Unknown
// tenants get their own name.
func (c *Config) PrefixNamespace(name string) string {
	return c.PrefixNamespaces()(name)
}

// PrefixNamespaces returns PrefixNamespace as a function that resolves
// the sharing once, up front: the engine asks for a namespace at every
// prefix lookup, and resolving the tenants' sharing each time would cost
// a pass over every tenant per request. It reflects c as it is now.
func (c *Config) PrefixNamespaces() func(name string) string {
	groups := c.prefixGroups()
	return func(name string) string {
		if g, ok := groups[name]; ok {
			return "group:" + g
		}
		return "tenant:" + name
	}
}

// prefixGroups resolves sharing into tenant → group name (tenants that
// share nothing are absent). Validation has ensured that each connected set
// names at most one prefix_group.
func (c *Config) prefixGroups() map[string]string {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra != rb {
			if rb < ra {
				ra, rb = rb, ra
			}
			parent[rb] = ra
		}
	}
	for _, t := range c.Tenants {
		find(t.Name)
		for _, o := range t.SharePrefixCacheWith {
			union(t.Name, o)
		}
		if t.PrefixGroup != "" {
			union(t.Name, "\x00group:"+t.PrefixGroup)
		}
	}
	members := map[string][]string{}
	// Each set's prefix_group, the last member's that sets one, in one
	// pass: scanning every tenant again for each tenant took minutes at
	// startup for a thousand tenants.
	groupOf := map[string]string{}
	for _, t := range c.Tenants {
		r := find(t.Name)
		members[r] = append(members[r], t.Name)
		if t.PrefixGroup != "" {
			groupOf[r] = t.PrefixGroup
		}
	}
	out := map[string]string{}
	for _, t := range c.Tenants {
		r := find(t.Name)
		switch named := groupOf[r]; {
		case named != "":
			out[t.Name] = named
		case len(members[r]) > 1:
			out[t.Name] = "+" + r // '+' is not allowed in a prefix_group
		}
	}
	return out
}

// Resolve fills the settings that depend on the model, given its context
// length: ContextLen (0 becomes the model's; more than the model's is an
// error), MaxInputTokens (0 becomes ContextLen) and KV.Pages (0 becomes
// room for four full-context sequences). It then checks that one
// full-context request fits in the pool, the preflight rule.
//
// kvBytesPerToken is the KV storage one token takes in this model at
// kv.dtype (model.Config.KVBytesPerToken), which kv.memory is divided by.
func (c *Config) Resolve(modelContextLen, kvBytesPerToken int) error {
	if modelContextLen <= 0 {
		return fmt.Errorf("config: the model reports context length %d", modelContextLen)
	}
	if c.ContextLen == 0 {
		c.ContextLen = modelContextLen
	}
	if c.ContextLen > modelContextLen {
		return fmt.Errorf("config: context_len is %d but the model's context length is %d; set at most %d", c.ContextLen, modelContextLen, modelContextLen)
	}
	if c.MaxInputTokens == 0 {
		c.MaxInputTokens = c.ContextLen
	}
	if c.MaxInputTokens > c.ContextLen {
		return fmt.Errorf("config: max_input_tokens is %d but context_len is %d; a prompt can never be longer than the context", c.MaxInputTokens, c.ContextLen)
	}
	perSeq := (c.ContextLen + c.KV.PageSize - 1) / c.KV.PageSize
	if c.KV.Memory != "" && c.KV.Pages == 0 {
		mem, err := ParseBytes(c.KV.Memory)
		if err != nil || kvBytesPerToken <= 0 {
			return fmt.Errorf("config: kv.memory %q: %v (%d bytes per token)", c.KV.Memory, err, kvBytesPerToken)
		}
		pageBytes := int64(c.KV.PageSize) * int64(kvBytesPerToken)
		if c.KV.Pages = int(min(mem/pageBytes, math.MaxInt32)); c.KV.Pages < perSeq {
			return fmt.Errorf("config: kv.memory %s holds %d pages of %d tokens (%d bytes each, %d per token at kv.dtype %s) but one full-context request of %d tokens needs %d pages (%d bytes); raise kv.memory or lower context_len",
				c.KV.Memory, c.KV.Pages, c.KV.PageSize, pageBytes, kvBytesPerToken, c.KV.DType, c.ContextLen, perSeq, int64(perSeq)*pageBytes)
		}
	}
	if c.KV.Pages == 0 {
		c.KV.Pages = 4 * perSeq
	}
	if c.KV.Pages < perSeq {
		return fmt.Errorf("config: kv.pages is %d (%d tokens of %d-token pages) but one full-context request of %d tokens needs %d pages; raise kv.pages to at least %d or lower context_len to at most %d",
			c.KV.Pages, c.KV.Pages*c.KV.PageSize, c.KV.PageSize, c.ContextLen, perSeq, perSeq, c.KV.Pages*c.KV.PageSize)
	}
	return nil
}

// PoolTokens is the tokens the KV pool holds: pages × page size.
func (c *Config) PoolTokens() int { return c.KV.Pages * c.KV.PageSize }

// ParseBytes parses a size such as "2GiB", "512 MiB", "1.5GB" or "1048576"
// (bytes): binary units KiB, MiB, GiB, TiB and decimal kB, MB, GB, TB.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.TrimSpace(t[i:])
	mult, ok := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (want B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)", unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v*mult >= 1) || math.IsInf(v, 0) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size of at least one byte", s)
	}
	return int64(v * mult), nil
}
