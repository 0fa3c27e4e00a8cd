package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPreflight(t *testing.T) {
	cfg := config.Default()
	cfg.ContextLen, cfg.KV.PageSize, cfg.KV.Pages = 256, 16, 16
	cfg.Tenants = []config.Tenant{{Name: "small", APIKeys: []string{"sk-small-0123456789"}, MaxKVPages: 4}}
	m, err := LoadModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	plan, err := Preflight(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Limits.PoolTokens != 256 || plan.FullContextFit != 1 || plan.Model != "stories260K" {
		t.Fatalf("plan %+v", plan)
	}
	if len(plan.Notes) != 1 || !strings.Contains(plan.Notes[0], "tenant small") || !strings.Contains(plan.String(), "note: tenant small") {
		t.Fatalf("notes %q, plan %s", plan.Notes, plan)
	}

	// An f16 cache: the same tokens in half the bytes.
	f16 := *cfg
	f16.KV.DType = "f16"
	p16, err := Preflight(&f16, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(256 * m.Config.KVBytesPerToken(model.KVF32)); plan.KVBytes != want || p16.KVBytes != want/2 || !strings.Contains(p16.String(), "of f16") {
		t.Fatalf("KV bytes: f32 %d, f16 %d (%s); want %d and %d", plan.KVBytes, p16.KVBytes, p16, want, want/2)
	}

	// kv.memory instead of kv.pages: the same bytes hold twice the pages
	// at f16.
	for _, dt := range []string{"f32", "f16"} {
		mc := config.Default()
		mc.ContextLen, mc.KV.PageSize, mc.KV.Memory, mc.KV.DType = 256, 16, "1MiB", dt
		p, err := Preflight(mc, m)
		kvt, _ := model.ParseKVType(dt)
		if want := (1 << 20) / (16 * m.Config.KVBytesPerToken(kvt)); err != nil || p.Pages != want || p.KVBytes > 1<<20 {
			t.Fatalf("kv.memory 1MiB at %s: %d pages (%d bytes), %v; want %d pages", dt, p.Pages, p.KVBytes, err, want)
		}
	}

	// One page short of a full-context request: refused, with the numbers.
	cfg = config.Default()
	cfg.ContextLen, cfg.KV.PageSize, cfg.KV.Pages = 256, 16, 15
	if _, err := Preflight(cfg, m); err == nil || !strings.Contains(err.Error(), "256") {
		t.Fatalf("a pool of 240 tokens for a 256-token context passed preflight: %v", err)
	}
}

// TestPrefixQuotasOfAGroup: tenants sharing a prefix group share one
// namespace, whose quota is the smallest any of them sets, whatever
// their order; a tenant on its own keeps its own.
func TestPrefixQuotasOfAGroup(t *testing.T) {
	cfg := config.Default()
	cfg.Tenants = []config.Tenant{
		{Name: "a", MaxCachedBlocks: 8, PrefixGroup: "g"},
		{Name: "b", MaxCachedBlocks: 64, PrefixGroup: "g"},
		{Name: "c", PrefixGroup: "g"},
		{Name: "d", MaxCachedBlocks: 32},
	}
	q := prefixQuotas(cfg)
	if g, d := q[cfg.PrefixNamespace("b")], q[cfg.PrefixNamespace("d")]; len(q) != 2 || g != 8 || d != 32 {
		t.Fatalf("quotas %v: group %d (want 8), d %d (want 32)", q, g, d)
	}
}

// TestTransferFailureCodesBounded: kv_transfers_failed_total's code label
// takes the code an ABORT frame carries, which the peer chose. bulkhead's
// own codes count under their names; a peer that sends a fresh code with
// every transfer (or a message where a code belongs) must not grow the
// scrape without bound.
func TestTransferFailureCodesBounded(t *testing.T) {
	reg := metrics.New()
	tm := NewTransferMetrics(reg, "completed", "kv_transfer_bytes_sent_total", "bytes")
	for i := 0; i < 1000; i++ {
		tm.Failed.WithLabelValues(fmt.Sprintf("peer_code_%d", i)).Inc()
	}
	tm.Failed.WithLabelValues("kv transfer aborted: tenant acme's prompt \"secret\"").Inc()
	tm.Failed.WithLabelValues(transfer.CodeChecksum).Inc()
	tm.Failed.WithLabelValues("shutting_down").Inc()
	n := testutil.CollectAndCount(reg.Registry, "bulkhead_kv_transfers_failed_total")
	if n > 2+maxOtherCodes+1 {
		t.Fatalf("%d series for 1003 failures: the code label is unbounded", n)
	}
	for code, want := range map[string]float64{transfer.CodeChecksum: 1, "shutting_down": 1, "peer_code_0": 1, OtherCode: 1000 - maxOtherCodes + 1} {
		if got := testutil.ToFloat64(tm.Failed.WithLabelValues(code)); got != want {
			t.Errorf("code %q: %v, want %v", code, got, want)
		}
	}
}
