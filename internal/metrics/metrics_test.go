package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestScrape(t *testing.T) {
	m := New()
	m.ObserveRequest("acme", 200)
	m.ObserveRequest("", 401)
	m.ObserveTTFT("acme", 30*time.Millisecond)
	m.ObserveInterToken(5 * time.Millisecond)
	m.AddTokens("acme", 7, 11)
	m.SetKVPagesUsed("acme", 3)
	m.SetKVPagesFree(509)
	m.PrefixCacheHit("acme", 2)
	m.PrefixCacheMiss("acme", 1)
	m.Preempted("acme")
	m.ObserveStep(64, 4, 2)
	out := scrape(t, m)
	for _, want := range []string{
		`bulkhead_http_requests_total{code="200",tenant="acme"} 1`,
		`bulkhead_http_requests_total{code="401",tenant="-"} 1`,
		`bulkhead_time_to_first_token_seconds_count{tenant="acme"} 1`,
		`bulkhead_inter_token_latency_seconds_count 1`,
		`bulkhead_generated_tokens_total{tenant="acme"} 11`,
		`bulkhead_prompt_tokens_total{tenant="acme"} 7`,
		`bulkhead_kv_pages{state="used",tenant="acme"} 3`,
		`bulkhead_kv_pages{state="free",tenant=""} 509`,
		`bulkhead_prefix_cache_lookups_total{result="hit",tenant="acme"} 2`,
		`bulkhead_prefix_cache_lookups_total{result="miss",tenant="acme"} 1`,
		`bulkhead_preemptions_total{tenant="acme"} 1`,
		`bulkhead_kv_ownership_violations_total 0`,
		`bulkhead_queue_depth 2`,
		`bulkhead_running_sequences 4`,
		`bulkhead_batch_tokens_count 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

// Two Metrics in one process must not collide (each has its own registry),
// and neither touches the global registry.
func TestIndependentRegistries(t *testing.T) {
	a, b := New(), New()
	a.OwnershipViolation()
	if got := testutil.ToFloat64(a.OwnershipViolations); got != 1 {
		t.Fatalf("a violations %v", got)
	}
	if got := testutil.ToFloat64(b.OwnershipViolations); got != 0 {
		t.Fatalf("b violations %v: registries share state", got)
	}
}

// TestNegativeCountsDoNotPanic: token and lookup counts can come from a
// peer (a decode server's usage reaches the router's AddTokens). A
// negative one must not panic the request that reports it (a Prometheus
// counter panics on a negative Add); it is dropped, and the other counts
// of the same call still land.
func TestNegativeCountsDoNotPanic(t *testing.T) {
	m := New()
	m.AddTokens("acme", 7, -3)
	m.AddTokens("acme", -1, 2)
	m.PrefixCacheHit("acme", -2)
	m.PrefixCacheMiss("acme", -2)
	if got := testutil.ToFloat64(m.PromptTokens.WithLabelValues("acme")); got != 7 {
		t.Errorf("prompt tokens %v, want 7", got)
	}
	if got := testutil.ToFloat64(m.GeneratedTokens.WithLabelValues("acme")); got != 2 {
		t.Errorf("generated tokens %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.PrefixCacheLookups.WithLabelValues("acme", "hit")); got != 0 {
		t.Errorf("hits %v, want 0", got)
	}
}
