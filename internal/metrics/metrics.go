// Package metrics holds every Prometheus collector of a Bulkhead server on
// one private registry, and serves it at /metrics.
//
// It owns metric names, labels and buckets. Each Metrics value has its own
// registry (never the global default), so tests and several servers in one
// process do not collide.
//
// It must never put request content, API keys or anything derived from a
// prompt into a label: the only request-derived label is the tenant name,
// which comes from configuration and so has bounded cardinality.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "bulkhead"

// NoTenant labels requests that failed before a tenant was known (a
// missing or bad API key).
const NoTenant = "-"

// Metrics is the set of collectors. Fields are exported so the engine can
// use them directly; the methods are shorthands for common updates. All are
// safe for concurrent use.
type Metrics struct {
	// Registry holds every collector below plus the Go runtime and process
	// collectors.
	Registry *prometheus.Registry

	// Requests counts finished HTTP API requests by tenant and status code.
	Requests *prometheus.CounterVec
	// TimeToFirstToken is seconds from request arrival to the first
	// generated token, by tenant.
	TimeToFirstToken *prometheus.HistogramVec
	// InterTokenLatency is seconds between consecutive tokens of one stream.
	InterTokenLatency prometheus.Histogram
	// PromptTokens counts processed prompt tokens by tenant.
	PromptTokens *prometheus.CounterVec
	// GeneratedTokens counts generated tokens by tenant; its rate is the
	// tokens/s throughput.
	GeneratedTokens *prometheus.CounterVec
	// KVPages is KV pages by tenant and state: state="used" per tenant, and
	// state="free" with tenant="" for the pool as a whole.
	KVPages *prometheus.GaugeVec
	// PrefixCacheLookups counts prefix-cache block lookups by tenant and
	// result ("hit" or "miss").
	PrefixCacheLookups *prometheus.CounterVec
	// Preemptions counts sequences preempted (pages released, to be
	// recomputed) by tenant.
	Preemptions *prometheus.CounterVec
	// OwnershipViolations counts KV page reads whose owner tag did not match
	// the reader. It must stay 0; anything else is a bug that was caught.
	OwnershipViolations prometheus.Counter
	// QueueDepth is requests admitted but not yet running.
	QueueDepth prometheus.Gauge
	// RunningSequences is sequences in the running batch.
	RunningSequences prometheus.Gauge
	// BatchTokens is tokens processed per engine step.
	BatchTokens prometheus.Histogram
}

// New returns a Metrics with every collector registered on a fresh
// registry.
func New() *Metrics {
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "HTTP API requests by tenant and status code.",
		}, []string{"tenant", "code"}),
		TimeToFirstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "time_to_first_token_seconds",
			Help: "Seconds from request arrival to the first generated token.", Buckets: latency,
		}, []string{"tenant"}),
		InterTokenLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "inter_token_latency_seconds",
			Help: "Seconds between consecutive generated tokens of one stream.", Buckets: latency,
		}),
		PromptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "prompt_tokens_total",
			Help: "Prompt tokens processed, by tenant.",
		}, []string{"tenant"}),
		GeneratedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generated_tokens_total",
			Help: "Tokens generated, by tenant.",
		}, []string{"tenant"}),
		KVPages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "kv_pages",
			Help: `KV cache pages: state="used" by tenant, state="free" for the whole pool.`,
		}, []string{"tenant", "state"}),
		PrefixCacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "prefix_cache_lookups_total",
			Help: "Prefix-cache block lookups by tenant and result (hit, miss).",
		}, []string{"tenant", "result"}),
		Preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "preemptions_total",
			Help: "Sequences preempted to free KV pages, by tenant.",
		}, []string{"tenant"}),
		OwnershipViolations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "kv_ownership_violations_total",
			Help: "KV page reads whose owner tag did not match the reader. Must be 0.",
		}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "queue_depth",
			Help: "Requests admitted and waiting to start.",
		}),
		RunningSequences: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "running_sequences",
			Help: "Sequences in the running batch.",
		}),
		BatchTokens: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "batch_tokens",
			Help:    "Tokens processed per engine step.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 .. 4096
		}),
	}
	m.Registry.MustRegister(
		m.Requests, m.TimeToFirstToken, m.InterTokenLatency, m.PromptTokens, m.GeneratedTokens,
		m.KVPages, m.PrefixCacheLookups, m.Preemptions, m.OwnershipViolations,
		m.QueueDepth, m.RunningSequences, m.BatchTokens,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// A violation counter that is absent reads as "never checked"; present
	// at 0 it reads as "checked, none".
	m.OwnershipViolations.Add(0)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// ObserveRequest counts one finished HTTP request.
func (m *Metrics) ObserveRequest(tenant string, code int) {
	if tenant == "" {
		tenant = NoTenant
	}
	m.Requests.WithLabelValues(tenant, strconv.Itoa(code)).Inc()
}

// ObserveTTFT records the time to first token.
func (m *Metrics) ObserveTTFT(tenant string, d time.Duration) {
	m.TimeToFirstToken.WithLabelValues(tenant).Observe(d.Seconds())
}

// ObserveInterToken records the gap between two tokens of one stream.
func (m *Metrics) ObserveInterToken(d time.Duration) { m.InterTokenLatency.Observe(d.Seconds()) }

// AddTokens counts a finished request's prompt and generated tokens.
// Negative counts are dropped (see addCount).
func (m *Metrics) AddTokens(tenant string, prompt, generated int) {
	addCount(m.PromptTokens.WithLabelValues(tenant), prompt)
	addCount(m.GeneratedTokens.WithLabelValues(tenant), generated)
}

// addCount adds n to c when it is positive. A Prometheus counter panics
// on a negative Add, and some counts come from outside this process (the
// usage a decode server reports to the router): a bad one must not take
// down the request that carries it.
func addCount(c prometheus.Counter, n int) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// SetKVPagesUsed sets the pages tenant holds.
func (m *Metrics) SetKVPagesUsed(tenant string, n int) {
	m.KVPages.WithLabelValues(tenant, "used").Set(float64(n))
}

// SetKVPagesFree sets the pool's free pages.
func (m *Metrics) SetKVPagesFree(n int) { m.KVPages.WithLabelValues("", "free").Set(float64(n)) }

// PrefixCacheHit counts n block hits for tenant.
func (m *Metrics) PrefixCacheHit(tenant string, n int) {
	addCount(m.PrefixCacheLookups.WithLabelValues(tenant, "hit"), n)
}

// PrefixCacheMiss counts n block misses for tenant.
func (m *Metrics) PrefixCacheMiss(tenant string, n int) {
	addCount(m.PrefixCacheLookups.WithLabelValues(tenant, "miss"), n)
}

// Preempted counts one preemption of a tenant's sequence.
func (m *Metrics) Preempted(tenant string) { m.Preemptions.WithLabelValues(tenant).Inc() }

// OwnershipViolation counts one owner-tag mismatch.
func (m *Metrics) OwnershipViolation() { m.OwnershipViolations.Inc() }

// ObserveStep records one engine step: tokens processed, sequences running
// and requests still queued.
func (m *Metrics) ObserveStep(batchTokens, running, queued int) {
	m.BatchTokens.Observe(float64(batchTokens))
	m.RunningSequences.Set(float64(running))
	m.QueueDepth.Set(float64(queued))
}
