package router

import (
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// routerMetrics are the router's own series; the API server's request
// metrics apply on top. A nil *routerMetrics records nothing.
type routerMetrics struct {
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
	up       *prometheus.GaugeVec
}

func newRouterMetrics(reg prometheus.Registerer, peers []*peer) *routerMetrics {
	if reg == nil {
		return nil
	}
	m := &routerMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "router", Name: "requests_total",
			Help: "Requests sent to each prefill/decode pair."}, []string{"prefill", "decode"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "router", Name: "failures_total",
			Help: "Requests that failed, by the stage that failed: pick (no healthy peer), reserve, prefill (including the KV transfer), decode, cancel (never acknowledged)."}, []string{"stage"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "router", Name: "peer_up",
			Help: "1 when the peer passes health checks and matches the deployment."}, []string{"role", "peer"}),
	}
	reg.MustRegister(m.requests, m.failures, m.up)
	for _, p := range peers {
		m.setUp(p, p.isUp())
	}
	for _, s := range []string{"pick", "reserve", "prefill", "decode", "cancel"} {
		m.failures.WithLabelValues(s)
	}
	return m
}

func (m *routerMetrics) request(p, d *peer) {
	if m != nil {
		m.requests.WithLabelValues(p.addr, d.addr).Inc()
	}
}

func (m *routerMetrics) failure(stage string) {
	if m != nil {
		m.failures.WithLabelValues(stage).Inc()
	}
}

func (m *routerMetrics) setUp(p *peer, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(p.role, p.addr).Set(v)
}
