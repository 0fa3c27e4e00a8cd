package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Router.
type Options struct {
	// Prefill and Decode are the control addresses (host:port) of the
	// peers; the router never sends to any other address. Each list needs
	// at least one.
	Prefill, Decode []string
	// Auth, the router's peer credentials, makes every control call
	// (https): to a peer listed under Prefill with a client that, under
	// mtls, accepts only a server certificate of role prefill, and to one
	// under Decode only one of role decode. A server of the other role
	// listed in the wrong list is then refused by what the CA signed, not
	// trusted on its own Info.Role. Auth and Client exclude each other.
	Auth *peerauth.Auth
	// Client makes every control call when Auth is nil; nil uses
	// http.DefaultClient (tests only).
	Client *http.Client
	// Scheme is "https" or "http" for Client; empty means "http". With
	// Auth it is Auth's.
	Scheme string
	// Fingerprint is the router's own model fingerprint (it tokenizes
	// with that model); every peer must match it. Empty skips the check.
	Fingerprint string
	// Own are the router's configured limits; each non-zero field
	// further lowers the peers' (see Limits).
	Own engine.Limits
	// TransferTimeout bounds a prefill call (reserve to acknowledged
	// transfer) and how long decode may take to reserve; default 30 s.
	TransferTimeout time.Duration
	// HealthEvery is the period of health checks (default 1 s); a peer
	// is down after DownAfter consecutive failures (default 3).
	HealthEvery time.Duration
	DownAfter   int
	// StartWait bounds how long New waits for peers that do not answer
	// yet (default 15 s); a mismatched peer fails New at once.
	StartWait time.Duration
	// CancelGiveUp bounds the retries of one cancel (default 30 s); past
	// it, the peer's own reservation lease frees the pages.
	CancelGiveUp time.Duration
	// PrefillSlots bounds the prefills in flight on each prefill peer
	// (default 4). Requests beyond it wait in the router before anything
	// is reserved for them.
	PrefillSlots int
	// Registerer receives the router's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Log receives peer state changes and failures; nil discards.
	Log *slog.Logger
}

// Router runs requests on prefill/decode pairs. It implements
// engine.Backend and is safe for concurrent use.
type Router struct {
	opts    Options
	log     *slog.Logger
	metrics *routerMetrics
	prefill []*peer
	decode  []*peer
	ref     peerapi.Info // the first peer's info: the deployment's identity
	// view is the admission limits over the serving peers' latest Info;
	// lmu serializes its recomputation (refreshLimits), so the last one
	// stored saw the latest state.
	view atomic.Pointer[limitView]
	lmu  sync.Mutex

	ctx    context.Context // ends at Close; every peer call hangs off it
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	rr     int               // round-robin tie-break
	sticky map[string]string // tenant -> prefill address it last used
}

// New handshakes with every configured peer and starts health checks. It
// refuses to start, naming every offending peer, when protocol versions,
// model fingerprints or KV layouts differ, when a peer never answers, or
// when a peer's certificate names another role than the list it is in.
func New(ctx context.Context, o Options) (*Router, error) {
	if len(o.Prefill) == 0 || len(o.Decode) == 0 {
		return nil, fmt.Errorf("router: needs at least one prefill and one decode peer (have %d prefill, %d decode); set peers.prefill and peers.decode", len(o.Prefill), len(o.Decode))
	}
	clients := map[string]*http.Client{}
	switch {
	case o.Auth != nil && o.Client != nil:
		return nil, errors.New("router: Options.Auth and Options.Client are both set; the peer credentials make the client")
	case o.Auth != nil:
		o.Scheme = o.Auth.Scheme()
		clients[RolePrefill] = o.Auth.HTTPClient(peerauth.RolePrefill)
		clients[RoleDecode] = o.Auth.HTTPClient(peerauth.RoleDecode)
	default:
		if o.Client == nil {
			o.Client = http.DefaultClient
		}
		if o.Scheme == "" {
			o.Scheme = "http"
		}
		clients[RolePrefill], clients[RoleDecode] = o.Client, o.Client
	}
	if o.PrefillSlots <= 0 {
		o.PrefillSlots = 4
	}
	if o.TransferTimeout <= 0 {
		o.TransferTimeout = 30 * time.Second
	}
	if o.HealthEvery <= 0 {
		o.HealthEvery = time.Second
	}
	if o.DownAfter <= 0 {
		o.DownAfter = 3
	}
	if o.StartWait <= 0 {
		o.StartWait = 15 * time.Second
	}
	if o.CancelGiveUp <= 0 {
		o.CancelGiveUp = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Router{opts: o, log: o.Log, sticky: map[string]string{}}
	r.ctx, r.stop = context.WithCancel(context.Background())
	seen := map[string]bool{}
	for _, set := range []struct {
		role  string
		addrs []string
		dst   *[]*peer
	}{{RolePrefill, o.Prefill, &r.prefill}, {RoleDecode, o.Decode, &r.decode}} {
		for _, a := range set.addrs {
			if seen[a] {
				r.stop()
				return nil, fmt.Errorf("router: peer %s is listed twice", a)
			}
			seen[a] = true
			pr := &peer{role: set.role, addr: a, base: o.Scheme + "://" + a, client: clients[set.role]}
			if set.role == RolePrefill {
				pr.slots = make(chan struct{}, o.PrefillSlots)
			}
			*set.dst = append(*set.dst, pr)
		}
	}
	if err := r.handshake(ctx); err != nil {
		r.stop()
		return nil, err
	}
	r.metrics = newRouterMetrics(o.Registerer, r.all())
	r.wg.Add(1)
	go r.healthLoop()
	return r, nil
}

func (r *Router) all() []*peer { return append(append([]*peer{}, r.prefill...), r.decode...) }

// handshake gets every peer's Info (waiting up to StartWait for those
// that do not answer), checks they agree, and sets the limits. A peer
// whose certificate names another role than its list fails it at once:
// waiting would not change the certificate.
func (r *Router) handshake(ctx context.Context) error {
	peers := r.all()
	infos := make([]peerapi.Info, len(peers))
	errs := make([]error, len(peers))
	deadline := time.Now().Add(r.opts.StartWait)
	for {
		var wg sync.WaitGroup
		for i, p := range peers {
			if errs[i] == nil && infos[i].Role != "" {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, done := context.WithTimeout(ctx, 2*time.Second)
				defer done()
				infos[i], errs[i] = r.getInfo(cctx, p)
			}()
		}
		wg.Wait()
		var missing, wrong []string
		for i, p := range peers {
			switch {
			case errs[i] == nil:
			case errors.Is(errs[i], peerauth.ErrRole):
				wrong = append(wrong, fmt.Sprintf("%s %s: %s", p.role, p.addr, roleRefusal(p, errs[i])))
			default:
				missing = append(missing, fmt.Sprintf("%s %s (%v)", p.role, p.addr, errs[i]))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("router: refusing to start: peers are not the servers their lists say:\n  %s", strings.Join(wrong, "\n  "))
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("router: peers did not answer the handshake within %s: %s", r.opts.StartWait, strings.Join(missing, "; "))
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	r.ref = infos[0]
	var bad []string
	for i, p := range peers {
		if why := compatible(p.role, r.ref, infos[i], r.opts.Fingerprint); why != "" {
			bad = append(bad, fmt.Sprintf("%s %s %s", p.role, p.addr, why))
			continue
		}
		p.info, p.up, p.counted = infos[i], true, true
	}
	if len(bad) > 0 {
		return fmt.Errorf("router: refusing to start: the peers do not form one deployment (reference: %s %s, model %s, fingerprint %s, protocol %d, %d layers × kv_dim %d, kv dtype %s):\n  %s",
			peers[0].role, peers[0].addr, r.ref.Model, short(r.ref.Fingerprint), r.ref.Protocol, r.ref.Layers, r.ref.KVDim, r.ref.KVType, strings.Join(bad, "\n  "))
	}
	r.refreshLimits()
	lim := r.Limits()
	r.log.Info("handshake complete", "prefill", len(r.prefill), "decode", len(r.decode), "model", r.ref.Model,
		"context_len", lim.ContextLen, "max_input_tokens", lim.MaxInputTokens, "pool_tokens", lim.PoolTokens)
	return nil
}

// Limits are the largest request some serving pair can take, as the
// peers last described themselves (viewOf), lowered by the router's own:
// per field, the largest limit over the peers of each role that are up,
// and the smallest of those over the two roles. Peers that are down take
// no request and do not count; with no peer of a role up, that role's
// last known limits do. Pairing sends a request only to peers whose own
// limits admit it, so a small peer takes only what it fits, and one that
// no serving peer fits is refused there before anything is reserved.
// They follow the peers (refreshLimits): they fall when a larger peer
// goes down or restarts with lower limits, and rise when it returns.
func (r *Router) Limits() engine.Limits { return r.view.Load().limits }

// TenantTokens implements engine.TenantLimiter: the smallest of the
// serving peers' advertised per-tenant limits (peerapi.Info.TenantTokens),
// so a request that sends no max_tokens is sized to what its tenant may
// hold on whichever pair runs it.
func (r *Router) TenantTokens(tenant string) (int, bool) {
	n, ok := r.view.Load().tenantTokens[tenant]
	return n, ok
}

// Info is the deployment's identity, as the first peer described it.
func (r *Router) Info() peerapi.Info { return r.ref }

// Peers reports every peer's state, prefill first.
func (r *Router) Peers() []PeerStatus {
	var out []PeerStatus
	for _, p := range r.all() {
		out = append(out, p.status())
	}
	return out
}

// Healthy reports whether at least one prefill and one decode peer are up.
func (r *Router) Healthy() bool {
	return anyUp(r.prefill) && anyUp(r.decode)
}

func anyUp(ps []*peer) bool {
	for _, p := range ps {
		if p.isUp() {
			return true
		}
	}
	return false
}

// Close stops health checks and aborts every peer call still running
// (their requests end with an error). It does not wait for cancels.
func (r *Router) Close() {
	r.stop()
	r.wg.Wait()
}

// healthLoop refreshes every peer's Info each HealthEvery.
func (r *Router) healthLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.HealthEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, p := range r.all() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.check(p)
			}()
		}
		wg.Wait()
	}
}

// check refreshes p's Info as a health check does.
func (r *Router) check(p *peer) {
	r.checkWithin(p, max(r.opts.HealthEvery, 500*time.Millisecond))
}

// checkWithin is check with the Info call bounded by d.
func (r *Router) checkWithin(p *peer, d time.Duration) {
	ctx, done := context.WithTimeout(r.ctx, d)
	defer done()
	info, err := r.getInfo(ctx, p)
	if r.ctx.Err() != nil {
		return
	}
	if errors.Is(err, peerauth.ErrRole) {
		// Another server now answers at this address (redeployed with
		// another role's certificate): no retry changes a certificate.
		r.setDown(p, "wrong certificate role: "+roleRefusal(p, err))
		return
	}
	if err != nil {
		r.failed(p, err.Error())
		return
	}
	if why := compatible(p.role, r.ref, info, r.opts.Fingerprint); why != "" {
		// A peer restarted with another model or layout: its KV would be
		// garbage to the others, so it stays out until it matches again.
		r.setDown(p, "incompatible: "+why)
		return
	}
	p.mu.Lock()
	changed := limitsChanged(p.info, info) || !p.counted
	p.info, p.fails, p.counted = info, 0, true
	p.mu.Unlock()
	if changed {
		// Before the peer is (again) up: the limits count what it
		// announces now, so a peer back from a restart with lower limits
		// gets no request admitted against its old ones, and one that
		// brings larger limits has them counted by its first request.
		r.refreshLimits()
	}
	p.mu.Lock()
	if !p.counted {
		// A failed call marked it down meanwhile; that came after this
		// Info, and the next health check judges it again.
		p.mu.Unlock()
		return
	}
	wasUp := p.up
	p.up, p.why = true, ""
	p.mu.Unlock()
	if !wasUp {
		r.log.Info("peer is up", "role", p.role, "peer", p.addr)
		r.metrics.setUp(p, true)
	}
}

// failed counts one failure; DownAfter in a row mark p down.
func (r *Router) failed(p *peer, why string) {
	p.mu.Lock()
	p.fails++
	n := p.fails
	p.mu.Unlock()
	if n >= r.opts.DownAfter {
		r.setDown(p, fmt.Sprintf("%d failures in a row, last: %s", n, why))
	}
}

// setDown takes p out of pairing and out of the limits: a down peer
// takes no request, so its limits must not bound those of the others.
func (r *Router) setDown(p *peer, why string) {
	p.mu.Lock()
	wasUp, wasCounted := p.up, p.counted
	p.up, p.counted, p.why = false, false, why
	p.mu.Unlock()
	if wasCounted {
		r.refreshLimits()
	}
	if wasUp {
		r.log.Warn("peer is down", "role", p.role, "peer", p.addr, "why", why)
		r.metrics.setUp(p, false)
	}
}

// pick chooses the least-loaded healthy decode and prefill peers whose
// announced limits admit req, and counts the request on both; the caller
// must call release. Among prefill peers within one unit of the least
// load, the one this tenant used last is preferred (its prefix cache may
// hold the tenant's prompt; the cache is per tenant, so this never pairs
// across tenants). When healthy peers of a role exist but none admits
// req, the error is their rejection (refusal), before anything is
// reserved; with none healthy, a 503.
func (r *Router) pick(req engine.Request) (d, p *peer, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rr++
	d, drej := r.leastLoaded(r.decode, "", req, nil)
	p, prej := r.leastLoaded(r.prefill, r.sticky[req.Tenant], req, nil)
	if d == nil || p == nil {
		role, rej := RoleDecode, drej
		if d != nil {
			role, rej = RolePrefill, prej
		}
		if rej != nil {
			return nil, nil, rej
		}
		return nil, nil, errkind.New(errkind.Overload, "no_healthy_peer", "no %s server is available", role)
	}
	r.sticky[req.Tenant] = p.addr
	d.addInflight(1)
	p.addInflight(1)
	return d, p, nil
}

// leastLoaded is the least-loaded healthy peer of ps that admits req and
// is not in skip (see pick for prefer). When there is none, rej is the
// rejection for req by the healthy peers that did not admit it (refusal),
// if any.
func (r *Router) leastLoaded(ps []*peer, prefer string, req engine.Request, skip map[*peer]bool) (best *peer, rej *errkind.Error) {
	type cand struct {
		p     *peer
		score int
	}
	var cs []cand
	var refused []int
	for i := range ps {
		k := (i + r.rr) % len(ps)
		p := ps[k]
		s, up := p.score()
		if !up || skip[p] {
			continue
		}
		if p.admits(req) != nil {
			refused = append(refused, k)
			continue
		}
		cs = append(cs, cand{p, s})
	}
	if len(cs) == 0 {
		return nil, refusal(req, ps, refused)
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].score < cs[j].score })
	for _, c := range cs {
		if c.p.addr == prefer && c.score <= cs[0].score+1 {
			return c.p, nil
		}
	}
	return cs[0].p, nil
}

// refusal is the rejection for req by the healthy peers ps[k], k in
// refused, none of which admits it: the one their loosest limits give,
// which names the largest limit the client could meet, the same whichever
// peer pairing looked at first. When their limits cross (the loosest
// admit req, but each peer refuses it for another field: the prompt fits
// one, the total another), it names what the client can meet with this
// prompt: the most tokens in all that a peer accepting the prompt holds
// (crossedRefusal). Admit gives the same error up front. It is nil when
// refused is empty.
func refusal(req engine.Request, ps []*peer, refused []int) *errkind.Error {
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	lim := ps[refused[0]].limits()
	for _, k := range refused[1:] {
		lim = loosest(lim, ps[k].limits())
	}
	if _, rej := engine.Admit(req, lim); rej != nil {
		return rej
	}
	return crossedRefusal(req, ps, refused)
}

// crossedRefusal is refusal's error when the peers' limits cross. The
// first refusing peer's own error (what was given before) named a limit
// the router's announced ones contradict ("accepts at most 100 input
// tokens" under a router limit of 400), and which one depended on the
// configuration order.
func crossedRefusal(req engine.Request, ps []*peer, refused []int) *errkind.Error {
	n := len(req.Prompt)
	best := 0
	for _, k := range refused {
		if l := ps[k].limits(); n <= l.MaxInputTokens {
			best = max(best, min(l.ContextLen, l.PoolTokens))
		}
	}
	if best == 0 { // no peer takes the prompt: the loosest limits said so already
		return ps[refused[0]].admits(req)
	}
	e := errkind.New(errkind.BadInput, "context_length_exceeded",
		"prompt has %d tokens and max_tokens is %d, %d in all; the %s servers of this deployment that accept a %d-token prompt hold at most %d tokens in all for one request",
		n, req.MaxTokens, uint64(n)+uint64(req.MaxTokens), ps[refused[0]].role, n, best)
	e.Param = "messages"
	return e
}

// roleRefusal is what the refusal of p's certificate for its role says,
// without the HTTP client's wrapping (the URL, the method).
func roleRefusal(p *peer, err error) string {
	why := err
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e == peerauth.ErrRole {
			break
		}
		if errors.Is(e, peerauth.ErrRole) {
			why = e
		}
	}
	return fmt.Sprintf("it is listed under peers.%s, but %v", p.role, why)
}

func release(d, p *peer) {
	d.addInflight(-1)
	p.addInflight(-1)
}

var errClosed = errors.New("router closed")
