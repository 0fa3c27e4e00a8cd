package decodesrv

import (
	"sync"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// tenantSlots enforces each tenant's max_concurrent_requests on a decode
// server from the moment a generate request reserves, not only when its
// verified KV reaches the engine. The engine counts a request only once it
// is submitted, after the whole transfer: checked there alone, a tenant at
// its limit had prefill compute and ship a whole prompt, and held decode
// pages meanwhile, only to be refused at the end. A slot is taken before
// anything is reserved and given back once the request holds nothing here
// (its reservation failed or was cancelled, or its engine request ended),
// so this count always covers the engine's own and the engine's check
// never refuses a request this one let through.
//
// Safe for concurrent use.
type tenantSlots struct {
	mu    sync.Mutex
	limit map[string]int // tenants with a limit; absent: unlimited
	held  map[string]int // tenants holding at least one slot
}

func newTenantSlots(tenants []config.Tenant) *tenantSlots {
	ts := &tenantSlots{limit: map[string]int{}, held: map[string]int{}}
	for _, t := range tenants {
		if t.MaxConcurrentRequests > 0 {
			ts.limit[t.Name] = t.MaxConcurrentRequests
		}
	}
	return ts
}

// take takes one of tenant's slots, or refuses with the Quota error the
// engine gives a tenant at its limit (the client's 429). The error names
// only this tenant's own count and limit, never anything about another
// tenant. release gives the slot back; calling it again does nothing.
func (ts *tenantSlots) take(tenant string) (release func(), err *errkind.Error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := ts.held[tenant]
	if lim, ok := ts.limit[tenant]; ok && n >= lim {
		return nil, errkind.New(errkind.Quota, "rate_limit_exceeded", "this API key's tenant has %d requests in flight, its limit is %d", n, lim)
	}
	ts.held[tenant] = n + 1
	var once sync.Once
	return func() {
		once.Do(func() {
			ts.mu.Lock()
			if ts.held[tenant]--; ts.held[tenant] <= 0 {
				delete(ts.held, tenant)
			}
			ts.mu.Unlock()
		})
	}, nil
}
