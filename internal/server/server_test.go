package server

import (
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/config"
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

	// One page short of a full-context request: refused, with the numbers.
	cfg = config.Default()
	cfg.ContextLen, cfg.KV.PageSize, cfg.KV.Pages = 256, 16, 15
	if _, err := Preflight(cfg, m); err == nil || !strings.Contains(err.Error(), "256") {
		t.Fatalf("a pool of 240 tokens for a 256-token context passed preflight: %v", err)
	}
}
