package server

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolOption adjusts the pool NewPool makes for one role.
type PoolOption func(*kv.PoolConfig)

// SealKV makes the pool keep the checksum of every KV vector from when it
// is written (kv.PoolConfig.Checksums): a prefill server's, so that its
// KV transfers need not read the KV to checksum it.
func SealKV(c *kv.PoolConfig) { c.Checksums = true }

// NewPool makes the KV pool the way serve does (scrub mode, tenant page
// quotas) and registers the pool-level metrics serve registers, plus the
// live lease count.
func NewPool(cfg *config.Config, m *model.Model, reg *metrics.Metrics, opts ...PoolOption) (*kv.Pool, error) {
	pc := kv.ConfigFor(&m.Config, cfg.KV.Pages, cfg.KV.PageSize)
	for _, o := range opts {
		o(&pc)
	}
	var err error
	if pc.Type, err = model.ParseKVType(cfg.KV.DType); err != nil {
		return nil, err
	}
	switch cfg.KV.Scrub {
	case config.ScrubPoison:
		pc.Scrub = kv.ScrubPoison
	case config.ScrubOff:
		pc.Scrub = kv.ScrubOff
	default:
		pc.Scrub = kv.ScrubZero
	}
	for _, t := range cfg.Tenants {
		if t.MaxKVPages > 0 {
			if pc.TenantPages == nil {
				pc.TenantPages = map[string]int{}
			}
			pc.TenantPages[t.Name] = t.MaxKVPages
		}
	}
	pool, err := kv.NewPool(pc)
	if err != nil {
		return nil, err
	}
	reg.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_page_allocations_total",
			Help: "KV pages handed out since start. A request rejected at admission never moves it."},
			func() float64 { return float64(pool.Stats().Allocs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_page_scrubs_total",
			Help: "KV pages scrubbed on their way back to the free list."},
			func() float64 { return float64(pool.Stats().Scrubs) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "kv_pool_pages",
			Help: "Pages in the KV pool."},
			func() float64 { return float64(cfg.KV.Pages) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "kv_pool_bytes",
			Help: "Memory of the KV pool's pages (keys and values, all layers), in bytes: half as much with kv.dtype f16.", ConstLabels: prometheus.Labels{"dtype": pc.Type.String()}},
			func() float64 { return float64(pc.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "kv_leases",
			Help: "Leases pinning KV pages (prefill KV awaiting a decode acknowledgement). 0 when idle."},
			func() float64 { return float64(pool.Stats().Leases) }),
	)
	return pool, nil
}

// NewEngine makes the engine for cfg, with its own compute threads. pfx
// is the prefix cache, nil for none (the disaggregated roles run without
// one: a decode server's sequences arrive filled by transfers, and a
// prefill server's leave as handoffs).
func NewEngine(cfg *config.Config, m *model.Model, pool *kv.Pool, reg *metrics.Metrics, lim engine.Limits, pfx *prefix.Cache) (*engine.Engine, *kernels.Pool, error) {
	tenantMax := map[string]int{}
	for _, t := range cfg.Tenants {
		if t.MaxConcurrentRequests > 0 {
			tenantMax[t.Name] = t.MaxConcurrentRequests
		}
	}
	ecfg := engine.Config{
		Limits: lim, BatchTokens: cfg.BatchTokens, MaxRunning: cfg.MaxSequences,
		MaxQueued: cfg.MaxQueue, TenantMaxRequests: tenantMax, Observer: Observer{reg},
	}
	if pfx != nil {
		ecfg.Prefix, ecfg.Namespace = pfx, cfg.PrefixNamespaces()
	}
	threads := kernels.NewPool(cfg.Threads)
	e, err := engine.New(ecfg, m, threads, pool)
	if err != nil {
		threads.Close()
		return nil, nil, err
	}
	return e, threads, nil
}

// LoadAndPreflight loads and preflights the model for cfg (changing cfg: its
// defaults are resolved).
func LoadAndPreflight(cfg *config.Config) (*model.Model, engine.Limits, error) {
	m, err := LoadModel(cfg)
	if err != nil {
		return nil, engine.Limits{}, err
	}
	if _, err := Preflight(cfg, m); err != nil {
		m.Close()
		return nil, engine.Limits{}, err
	}
	// The fingerprint reads every weight. Taken now, at load, it hashes
	// the weights as loaded, and no request handler's goroutine (which,
	// unlike the engine's, a fault in a cut-short file would kill) ever
	// reads the mapping to answer the router's handshake.
	m.Fingerprint()
	return m, Limits(cfg), nil
}

// UpdateGauges refreshes the kv_pages gauges four times a second, as serve
// does.
func UpdateGauges(ctx context.Context, pool *kv.Pool, reg *metrics.Metrics) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	seen := map[string]bool{}
	for {
		st := pool.Stats()
		reg.SetKVPagesFree(st.Free)
		for tenant := range seen {
			if _, ok := st.TenantPages[tenant]; !ok {
				reg.SetKVPagesUsed(tenant, 0)
			}
		}
		for tenant, n := range st.TenantPages {
			reg.SetKVPagesUsed(tenant, n)
			seen[tenant] = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Observer adapts metrics to engine.Observer.
type Observer struct{ m *metrics.Metrics }

// ObserveStep records one engine step.
func (o Observer) ObserveStep(tokens, running, queued int) { o.m.ObserveStep(tokens, running, queued) }

// Preempted counts one preemption of tenant's sequence.
func (o Observer) Preempted(tenant string) { o.m.Preempted(tenant) }

// OwnershipViolation counts one KV owner-tag mismatch.
func (o Observer) OwnershipViolation() { o.m.OwnershipViolation() }

// PrefixLookup counts one prefix-cache lookup's block hits and misses.
func (o Observer) PrefixLookup(tenant string, hit, miss int) {
	o.m.PrefixCacheHit(tenant, hit)
	o.m.PrefixCacheMiss(tenant, miss)
}

// TransferMetrics are the KV transfer counters of one role.
type TransferMetrics struct {
	Started, Completed prometheus.Counter
	// Failed counts failed transfers by error code, with the code's
	// cardinality bounded (FailureCodes).
	Failed       *FailureCodes
	Bytes        prometheus.Counter
	AuthFailures prometheus.Counter
	// Checksums counts a prefill server's DATA frames by where their
	// checksums came from ("kept" since the KV was written, or "read"
	// from the KV at send time); nil for other roles.
	Checksums *prometheus.CounterVec
}

// CountChecksums registers Checksums on reg (prefill servers).
func (t *TransferMetrics) CountChecksums(reg *metrics.Metrics) {
	t.Checksums = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfer_frame_checksums_total",
		Help: "KV frames sent, by where their CRC32C came from: kept by the pool since the KV was written (the fast path), or read from the KV at send time."},
		[]string{"source"})
	reg.Registry.MustRegister(t.Checksums)
}

// NewTransferMetrics registers one role's transfer counters on reg.
func NewTransferMetrics(reg *metrics.Metrics, completedHelp, bytesName, bytesHelp string) *TransferMetrics {
	t := &TransferMetrics{
		Started: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_started_total",
			Help: "KV transfers started."}),
		Completed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_completed_total",
			Help: completedHelp}),
		Failed: &FailureCodes{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_failed_total",
			Help: "KV transfers that ended in error, by error code (\"other\" for codes past a bounded set)."}, []string{"code"})},
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: bytesName, Help: bytesHelp}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "peer_auth_failures_total",
			Help: "KV stream connections refused because the peer failed authentication."}),
	}
	reg.Registry.MustRegister(t.Started, t.Completed, t.Failed.vec, t.Bytes, t.AuthFailures)
	return t
}

// FailureCodes is kv_transfers_failed_total{code}. A failed transfer's
// code is not always this process's own: an ABORT frame carries whatever
// code its sender chose (up to transfer.MaxString bytes), and a peer
// running other code, or a faulty one, could otherwise mint a new time
// series with every transfer, which grows the scrape and the monitoring
// system's memory without bound. So the codes this deployment's own
// processes use always count under their name, at most maxOtherCodes
// further well-formed codes count under theirs (a newer peer's), and
// anything else under "other".
type FailureCodes struct {
	vec   *prometheus.CounterVec
	mu    sync.Mutex
	extra map[string]bool
}

// OtherCode labels failures whose code is outside the bounded set.
const OtherCode = "other"

// maxOtherCodes bounds the codes beyond knownCodes that get a series.
const maxOtherCodes = 16

// knownCodes are the failure codes bulkhead's own transfer code uses.
var knownCodes = map[string]bool{
	transfer.CodeChecksum: true, transfer.CodeDigest: true, transfer.CodeCount: true,
	transfer.CodeCoverage: true, transfer.CodeTenant: true, transfer.CodeTimeout: true,
	transfer.CodePeerLost: true, transfer.CodeCancelled: true, transfer.CodeProtocol: true,
	transfer.CodeUnknownID: true, transfer.CodeReplayed: true, transfer.CodeTooLong: true,
	transfer.CodeWrite: true, "transfer_aborted": true, "decode_unreachable": true, "shutting_down": true,
}

// WithLabelValues returns the counter for code (named after the
// CounterVec method it replaces, so callers did not change).
func (f *FailureCodes) WithLabelValues(code string) prometheus.Counter {
	return f.vec.WithLabelValues(f.label(code))
}

// label is the label value code counts under.
func (f *FailureCodes) label(code string) string {
	if knownCodes[code] || code == OtherCode {
		return code
	}
	if !wellFormedCode(code) {
		return OtherCode
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.extra[code] {
		if len(f.extra) >= maxOtherCodes {
			return OtherCode
		}
		if f.extra == nil {
			f.extra = map[string]bool{}
		}
		f.extra[code] = true
	}
	return code
}

// wellFormedCode reports whether code looks like an error code (1 to 64
// of a-z, 0-9 and _), so that no text a peer chose, such as a message,
// becomes a label.
func wellFormedCode(code string) bool {
	if code == "" || len(code) > 64 {
		return false
	}
	for _, c := range code {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// AdmitPeer checks a request a router sent to a prefill or decode server:
// a well-formed, non-zero transfer ID, a tenant name, prompt tokens inside
// the vocabulary, then engine.Admit against this server's own limits.
// Nothing is reserved or computed before it passes.
func AdmitPeer(id, tenant string, prompt []int, maxTokens int, sampling peerapi.Sampling, vocab int, lim engine.Limits) (transfer.ID, engine.Admitted, error) {
	tid, err := transfer.ParseID(id)
	if err != nil {
		return tid, engine.Admitted{}, errkind.Wrap(errkind.BadInput, transfer.CodeProtocol, err, "the transfer id is not 32 hex digits")
	}
	if tid.IsZero() {
		return tid, engine.Admitted{}, errkind.New(errkind.BadInput, transfer.CodeProtocol, "the transfer id is zero")
	}
	if tenant == "" || len(tenant) > transfer.MaxString {
		return tid, engine.Admitted{}, errkind.New(errkind.BadInput, "invalid_tenant", "the tenant name is empty or longer than %d bytes", transfer.MaxString)
	}
	for i, t := range prompt {
		if t < 0 || t >= vocab {
			return tid, engine.Admitted{}, errkind.New(errkind.BadInput, "invalid_prompt", "prompt token %d is %d, outside the vocabulary of %d", i, t, vocab)
		}
	}
	a, rej := engine.Admit(engine.Request{Tenant: tenant, Prompt: prompt, MaxTokens: maxTokens, Sampling: sampling.Params()}, lim)
	if rej != nil {
		return tid, a, rej
	}
	return tid, a, nil
}

// TenantTokens is, for each tenant with a KV page quota in pool, the most
// tokens one of its requests can hold (quota × page size): what a peer
// advertises in peerapi.Info.TenantTokens.
func TenantTokens(pool *kv.Pool) map[string]int {
	pages := pool.Config().TenantPages
	if len(pages) == 0 {
		return nil
	}
	out := make(map[string]int, len(pages))
	for t := range pages {
		out[t], _ = pool.TenantTokens(t)
	}
	return out
}

// PromptBodyLimit is the largest control body carrying a prompt that a
// prefill or decode server reads: max_body_bytes bounds what a client
// sends as text, but the router sends the prompt as token ids, which can
// take more bytes (up to digits+1 per token). A prompt the server's own
// limits admit must never be refused as a body too large: that would be a
// 400 for a request the client sent correctly.
func PromptBodyLimit(maxBody int64, maxInputTokens, vocab int) int64 {
	perToken := int64(len(strconv.Itoa(max(vocab-1, 0))) + 1)
	return max(maxBody, 64<<10+int64(maxInputTokens)*perToken)
}
