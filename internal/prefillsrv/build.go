package prefillsrv

import (
	"context"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/server"
	"github.com/prometheus/client_golang/prometheus"
)

// buildPool makes the KV pool the way serve does (scrub mode, tenant page
// quotas) and registers the pool-level metrics serve registers, plus the
// live lease count.
func buildPool(cfg *config.Config, m *model.Model, reg *metrics.Metrics) (*kv.Pool, error) {
	pc := kv.ConfigFor(&m.Config, cfg.KV.Pages, cfg.KV.PageSize)
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "kv_leases",
			Help: "Leases pinning KV pages (prefill KV awaiting a decode acknowledgement). 0 when idle."},
			func() float64 { return float64(pool.Stats().Leases) }),
	)
	return pool, nil
}

// buildEngine makes the engine as serve does, without a prefix cache:
// a decode server's sequences arrive filled by transfers, and a prefill
// server's leave as handoffs.
func buildEngine(cfg *config.Config, m *model.Model, pool *kv.Pool, reg *metrics.Metrics, lim engine.Limits) (*engine.Engine, *kernels.Pool, error) {
	tenantMax := map[string]int{}
	for _, t := range cfg.Tenants {
		if t.MaxConcurrentRequests > 0 {
			tenantMax[t.Name] = t.MaxConcurrentRequests
		}
	}
	threads := kernels.NewPool(cfg.Threads)
	e, err := engine.New(engine.Config{
		Limits: lim, BatchTokens: cfg.BatchTokens, MaxRunning: cfg.MaxSequences,
		MaxQueued: cfg.MaxQueue, TenantMaxRequests: tenantMax, Observer: observer{reg},
	}, m, threads, pool)
	if err != nil {
		threads.Close()
		return nil, nil, err
	}
	return e, threads, nil
}

// loadModel loads and preflights the model for cfg (changing cfg: its
// defaults are resolved).
func loadModel(cfg *config.Config) (*model.Model, engine.Limits, error) {
	m, err := server.LoadModel(cfg)
	if err != nil {
		return nil, engine.Limits{}, err
	}
	if _, err := server.Preflight(cfg, m); err != nil {
		m.Close()
		return nil, engine.Limits{}, err
	}
	return m, server.Limits(cfg), nil
}

// updateGauges refreshes the kv_pages gauges four times a second, as serve
// does.
func updateGauges(ctx context.Context, pool *kv.Pool, reg *metrics.Metrics) {
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

// observer adapts metrics to engine.Observer.
type observer struct{ m *metrics.Metrics }

func (o observer) ObserveStep(tokens, running, queued int) { o.m.ObserveStep(tokens, running, queued) }
func (o observer) Preempted(tenant string)                 { o.m.Preempted(tenant) }
func (o observer) OwnershipViolation()                     { o.m.OwnershipViolation() }
func (o observer) PrefixLookup(tenant string, hit, miss int) {
	o.m.PrefixCacheHit(tenant, hit)
	o.m.PrefixCacheMiss(tenant, miss)
}

// transferMetrics are the KV transfer counters of one role.
type transferMetrics struct {
	started, completed prometheus.Counter
	failed             *prometheus.CounterVec
	bytes              prometheus.Counter
	authFailures       prometheus.Counter
}

func newTransferMetrics(reg *metrics.Metrics, completedHelp, bytesName, bytesHelp string) *transferMetrics {
	t := &transferMetrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_started_total",
			Help: "KV transfers started."}),
		completed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_completed_total",
			Help: completedHelp}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_transfers_failed_total",
			Help: "KV transfers that ended in error, by error code."}, []string{"code"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: bytesName, Help: bytesHelp}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "peer_auth_failures_total",
			Help: "KV stream connections refused because the peer failed authentication."}),
	}
	reg.Registry.MustRegister(t.started, t.completed, t.failed, t.bytes, t.authFailures)
	return t
}
