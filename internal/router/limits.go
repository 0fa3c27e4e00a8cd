package router

import (
	"maps"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// limitView is what the router admits against at one moment: the minimum
// over every peer's latest Info, lowered by the router's own limits.
// It is replaced whole, never changed, so a reader needs no lock.
type limitView struct {
	limits engine.Limits
	// tenantTokens bounds one request of a tenant with a KV page quota on
	// some peer (TenantTokens): the smallest over the peers.
	tenantTokens map[string]int
}

// refreshLimits recomputes the view from every peer's latest Info. The
// handshake's limits alone went stale when a peer restarted with lower
// ones: the router went on admitting requests, and sizing requests that
// send no max_tokens, for limits the peer no longer had, and the peer
// refused them after a reservation, as a 400 the client had not earned.
// Peers that are down count with the Info they last gave: one that comes
// back refreshes it before it takes requests again (check).
func (r *Router) refreshLimits() {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	var infos []peerapi.Info
	for _, p := range r.all() {
		p.mu.Lock()
		if p.info.Role != "" {
			infos = append(infos, p.info)
		}
		p.mu.Unlock()
	}
	v := viewOf(r.opts.Own, infos)
	old := r.view.Swap(v)
	if old != nil && (old.limits != v.limits || !maps.Equal(old.tenantTokens, v.tenantTokens)) {
		r.log.Info("peer limits changed", "context_len", v.limits.ContextLen, "max_input_tokens", v.limits.MaxInputTokens,
			"pool_tokens", v.limits.PoolTokens, "tenants_with_kv_quota", len(v.tenantTokens))
	}
}

// viewOf is the field-by-field minimum over infos (at least one), each
// field further lowered by own's when own's is set.
func viewOf(own engine.Limits, infos []peerapi.Info) *limitView {
	v := &limitView{limits: infos[0].Limits, tenantTokens: map[string]int{}}
	for _, in := range infos {
		v.limits = v.limits.Min(in.Limits)
		for t, n := range in.TenantTokens {
			if m, ok := v.tenantTokens[t]; !ok || n < m {
				v.tenantTokens[t] = n
			}
		}
	}
	for _, f := range []struct{ own, lim *int }{
		{&own.ContextLen, &v.limits.ContextLen}, {&own.MaxInputTokens, &v.limits.MaxInputTokens}, {&own.PoolTokens, &v.limits.PoolTokens},
	} {
		if *f.own > 0 {
			*f.lim = min(*f.lim, *f.own)
		}
	}
	return v
}

// limitsChanged reports whether next announces other limits than prev.
func limitsChanged(prev, next peerapi.Info) bool {
	return prev.Limits != next.Limits || !maps.Equal(prev.TenantTokens, next.TenantTokens)
}

// admits says why p, by the limits it last announced, would refuse req at
// its own admission (the rejection it would give), or nil. Pairing skips
// such a peer: a request admitted just before the router heard of lower
// limits still goes only where it fits. A tenant's KV quota is left to
// the peer itself, which answers for it before anything is computed.
func (p *peer) admits(req engine.Request) *errkind.Error {
	p.mu.Lock()
	lim := p.info.Limits
	p.mu.Unlock()
	_, rej := engine.Admit(req, lim)
	return rej
}

// limitRefused reports whether e is a peer's refusal for length: the peer
// may have restarted with lower limits than the router last heard.
func limitRefused(e *errkind.Error) bool {
	return e != nil && e.Kind == errkind.BadInput && e.Code == "context_length_exceeded"
}

// refreshAfterRefusal asks p for its Info at once after it refused a
// request for its length (limitRefused), rather than at the next health
// check, and reports whether its limits as now announced refuse req, that
// is whether the refusal came from limits the router did not know yet.
func (r *Router) refreshAfterRefusal(p *peer, req engine.Request) bool {
	// Bounded as a control call is: the refused request waits for it.
	r.checkWithin(p, min(max(r.opts.HealthEvery, 500*time.Millisecond), 2*time.Second))
	return p.admits(req) != nil
}
