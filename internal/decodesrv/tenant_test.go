package decodesrv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// TestTenantLimitAtReservation: a tenant at its max_concurrent_requests
// is refused when decode is asked to reserve, with the engine's 429
// (quota, rate_limit_exceeded) naming only its own count, before a page
// is allocated and so before prefill computes or sends anything. Another
// tenant is not affected, and a reservation that is cancelled, that fails
// its transfer, or whose request ends, gives its slot back.
func TestTenantLimitAtReservation(t *testing.T) {
	p := startPair(t, setup{dec: func(c *config.Config) {
		c.Tenants = []config.Tenant{{Name: "acme", MaxConcurrentRequests: 1}, {Name: "globex", MaxConcurrentRequests: 3}}
	}})
	prompt := encode("Once upon a time")
	reserve := func(tenant string) (string, *genStream, peerapi.Event) {
		t.Helper()
		id := transfer.NewID().String()
		g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: tenant, Prompt: prompt, MaxTokens: 4})
		ev, err := g.next()
		if err != nil {
			t.Fatalf("%s: reading the generate stream: %v", tenant, err)
		}
		return id, g, ev
	}
	mustReserve := func(tenant string) (string, *genStream) {
		t.Helper()
		id, g, ev := reserve(tenant)
		if ev.Type != peerapi.EventReserved {
			t.Fatalf("%s: reservation refused: %+v (%+v)", tenant, ev, ev.Error)
		}
		return id, g
	}
	mustRefuse := func(tenant string) {
		t.Helper()
		allocs := p.metric(p.decURL, "bulkhead_kv_page_allocations_total")
		_, g, ev := reserve(tenant)
		g.resp.Body.Close()
		if ev.Type != peerapi.EventError || ev.Error.Kind != "quota" || ev.Error.Code != "rate_limit_exceeded" {
			t.Fatalf("%s over its limit: %+v (%+v), want a quota error rate_limit_exceeded", tenant, ev, ev.Error)
		}
		// Only acme's own count: globex's two reservations would make a
		// server-wide count 3.
		if !strings.Contains(ev.Error.Message, "has 1 requests in flight, its limit is 1") {
			t.Fatalf("refusal message %q does not give the tenant's own count and limit", ev.Error.Message)
		}
		if a := p.metric(p.decURL, "bulkhead_kv_page_allocations_total"); a != allocs {
			t.Fatalf("a refused reservation allocated pages: %s -> %s", allocs, a)
		}
	}

	_, other1 := mustReserve("globex")
	_, other2 := mustReserve("globex")
	held, g := mustReserve("acme")
	mustRefuse("acme")

	// The router's cancel frees the slot.
	if c := p.cancel(p.decURL, held); !c.Known {
		t.Fatal("decode did not know the reservation it was asked to cancel")
	}
	if _, last, _ := g.rest(); last.Type != peerapi.EventError {
		t.Fatalf("cancelled reservation ended with %+v", last)
	}
	// A transfer that fails (prefill sends one token fewer than reserved)
	// frees it.
	id, g := mustReserve("acme")
	mustRefuse("acme")
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt[:len(prompt)-1], MaxTokens: 4, DecodeKVAddr: p.kvAddr})
	if pr.OK {
		t.Fatal("a short transfer succeeded")
	}
	if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error.Code != transfer.CodeCount {
		t.Fatalf("short transfer ended with %+v (%+v)", last, last.Error)
	}
	// The router hanging up frees it, once decode noticed.
	_, g = mustReserve("acme")
	g.resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, g, ev := reserve("acme")
		if ev.Type == peerapi.EventReserved {
			// And a request that runs to its end frees it.
			pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 4, DecodeKVAddr: p.kvAddr})
			if _, last, _ := g.rest(); !pr.OK || last.Type != peerapi.EventDone {
				t.Fatalf("acme within its limit: prefill %+v, last %+v (%+v)", pr.Error, last, last.Error)
			}
			break
		}
		g.resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a reservation whose router hung up was never given back: %+v", ev.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, last, pr := p.run(prompt, 4, peerapi.Sampling{}); !pr.OK || last.Type != peerapi.EventDone {
		t.Fatalf("acme after a finished request: prefill %+v, last %+v (%+v)", pr.Error, last, last.Error)
	}
	other1.resp.Body.Close()
	other2.resp.Body.Close()
	p.idle()
}
