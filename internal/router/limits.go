package router

import (
	"maps"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// limitView is what the router admits against at one moment, computed
// from the peers that can serve now (refreshLimits). It is replaced
// whole, never changed, so a reader needs no lock.
type limitView struct {
	limits engine.Limits
	// tenantTokens bounds one request of a tenant with a KV page quota on
	// some serving peer (TenantTokens): the smallest over those peers.
	tenantTokens map[string]int
}

// refreshLimits recomputes the view from the serving peers' latest Info.
// Every change of a peer's Info or of whether it serves is followed by a
// call: the handshake's limits alone went stale when a peer restarted
// with lower ones (requests admitted for limits it no longer had were
// refused after a reservation, as a 400 the client had not earned), and
// limits taken over every configured peer let one dead or misconfigured
// small peer, which takes no request, lower them for all. lmu makes the
// last view stored the one computed last, from the latest state.
func (r *Router) refreshLimits() {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	v := viewOf(r.opts.Own, servingInfos(r.prefill), servingInfos(r.decode))
	old := r.view.Swap(v)
	if old != nil && (old.limits != v.limits || !maps.Equal(old.tenantTokens, v.tenantTokens)) {
		r.log.Info("router limits changed", "context_len", v.limits.ContextLen, "max_input_tokens", v.limits.MaxInputTokens,
			"pool_tokens", v.limits.PoolTokens, "tenants_with_kv_quota", len(v.tenantTokens))
	}
}

// servingInfos is the latest Info of each peer of one role that the view
// counts (peer.counted: up, or coming up with its Info refreshed). With
// none counted it is the Info each last gave: requests then fail with 503
// at pairing (no healthy peer) rather than as too long for limits of 0,
// and those they fail with name the limits the role had when last seen.
func servingInfos(ps []*peer) []peerapi.Info {
	var live, last []peerapi.Info
	for _, p := range ps {
		p.mu.Lock()
		if p.info.Role != "" {
			last = append(last, p.info)
			if p.counted {
				live = append(live, p.info)
			}
		}
		p.mu.Unlock()
	}
	if len(live) == 0 {
		return last
	}
	return live
}

// viewOf is the view over the serving peers of each role (roles, each
// with at least one Info; empty ones are skipped). A request runs on one
// peer of each role, and pairing sends it only to peers whose own limits
// admit it (peer.admits), so a limit is the largest any serving peer of
// the role has, and the smallest of those over the roles: a request
// admitted against it fits a serving prefill and a serving decode field
// by field. (Peers whose limits cross, one with the larger context and
// another with the larger input limit, can admit a request that no single
// peer fits; pairing refuses it then, with that role's rejection, before
// anything is reserved.) Each field is further lowered by own's when
// own's is set.
//
// Tenant quotas are not checked by pairing (the peer judges them, against
// what the tenant holds there now), so a tenant's bound is the smallest
// over every serving peer: the default size of its requests then fits
// whichever pair runs them.
func viewOf(own engine.Limits, roles ...[]peerapi.Info) *limitView {
	v := &limitView{tenantTokens: map[string]int{}}
	first := true
	for _, infos := range roles {
		if len(infos) == 0 {
			continue
		}
		role := infos[0].Limits
		for _, in := range infos {
			role = loosest(role, in.Limits)
			for t, n := range in.TenantTokens {
				if m, ok := v.tenantTokens[t]; !ok || n < m {
					v.tenantTokens[t] = n
				}
			}
		}
		if first {
			v.limits, first = role, false
		} else {
			v.limits = v.limits.Min(role)
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

// loosest is the larger of two limits, field by field: what the looser
// of two peers of one role admits in each field.
func loosest(a, b engine.Limits) engine.Limits {
	return engine.Limits{ContextLen: max(a.ContextLen, b.ContextLen), MaxInputTokens: max(a.MaxInputTokens, b.MaxInputTokens), PoolTokens: max(a.PoolTokens, b.PoolTokens)}
}

// limitsChanged reports whether next announces other limits than prev.
func limitsChanged(prev, next peerapi.Info) bool {
	return prev.Limits != next.Limits || !maps.Equal(prev.TenantTokens, next.TenantTokens)
}

// limits are the limits p last announced.
func (p *peer) limits() engine.Limits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info.Limits
}

// admits says why p, by the limits it last announced, would refuse req at
// its own admission (the rejection it would give), or nil. Pairing skips
// such a peer: the router's limits are the loosest serving peer's, and a
// request admitted just before the router heard of lower limits still
// goes only where it fits. A tenant's KV quota is left to the peer
// itself, which answers for it before anything is computed.
func (p *peer) admits(req engine.Request) *errkind.Error {
	_, rej := engine.Admit(req, p.limits())
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
