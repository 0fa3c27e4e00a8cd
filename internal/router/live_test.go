package router

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// decodeLimits gives each decode peer of f the limits of its index in
// lims (fullLimits past the end).
func decodeLimits(f *fakeCluster, lims ...engine.Limits) {
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		if role == RoleDecode && i < len(lims) {
			in.Limits = lims[i]
		}
	}
}

// switchable makes each decode peer of f answer its Info with 503 while
// its flag is set, so health checks mark it down, and clear it to bring
// the peer back.
func switchable(f *fakeCluster, n int) []*atomic.Bool {
	down := make([]*atomic.Bool, n)
	for i := range down {
		down[i] = new(atomic.Bool)
	}
	f.infoDown = func(role string, i int) bool { return role == RoleDecode && i < n && down[i].Load() }
	return down
}

// submitAdmitted admits a request against the router's own limits, as the
// API does, and runs it to its end.
func submitAdmitted(t *testing.T, r *Router, tenant string, prompt, max int) {
	t.Helper()
	a, rej := engine.Admit(engine.Request{Tenant: tenant, Prompt: make([]int, prompt), MaxTokens: max}, r.Limits())
	if rej != nil {
		t.Fatalf("%d+%d tokens refused against the router's limits %+v: %v", prompt, max, r.Limits(), rej)
	}
	st, err := r.Submit(context.Background(), a)
	if err != nil {
		t.Fatalf("%d+%d tokens: %v", prompt, max, err)
	}
	if _, res := drain(t, st); res.Err != nil {
		t.Fatalf("%d+%d tokens: %v", prompt, max, res.Err)
	}
}

// TestDeadSmallPeerDoesNotLowerLimits: a decode peer with a small context
// that died takes no request, so it must not lower what the router
// admits; a request only the live larger decode fits runs there.
func TestDeadSmallPeerDoesNotLowerLimits(t *testing.T) {
	f := newFake()
	decodeLimits(f, lowerLimits)
	r, servers := f.start(t, 1, 2)
	servers[1].Close() // decode 0, the small one: connection refused from now on
	waitFor(t, "the dead decode was never marked down", func() bool { return !r.Peers()[1].Up })
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits %+v with the small decode dead, want the live one's %+v", got, fullLimits)
	}
	submitAdmitted(t, r, "acme", 7, 300)
	if on := f.decodesAsked(); len(on) != 1 || on[0] != 1 {
		t.Fatalf("reservations went to decode %v, want [1]", on)
	}
}

// TestLiveSmallPeerGetsOnlyWhatFits: a live decode with a small context
// and a live prefill with a small input limit serve the requests they
// fit, and never one they do not while a larger live peer takes it; the
// router admits what the larger peers take.
func TestLiveSmallPeerGetsOnlyWhatFits(t *testing.T) {
	f := newFake()
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		switch {
		case role == RoleDecode && i == 0:
			in.Limits = lowerLimits
		case role == RolePrefill && i == 0:
			in.Limits.MaxInputTokens = 100
		}
	}
	r, _ := f.start(t, 2, 2)
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits %+v, want the larger live peers' %+v", got, fullLimits)
	}
	tenants := []string{"acme", "globex", "initech", "umbrella"} // one tenant would stick to one prefill
	for _, tenant := range tenants {
		submitAdmitted(t, r, tenant, 150, 300) // over decode 0's context and prefill 0's input limit
	}
	f.mu.Lock()
	for k := range f.generateOn {
		if f.generateOn[k] != 1 || f.prefillOn[k] != 1 {
			f.mu.Unlock()
			t.Fatalf("150+300 tokens reserved on decodes %v, prefilled on %v; only decode 1 and prefill 1 fit them", f.generateOn, f.prefillOn)
		}
	}
	f.generateOn, f.prefillOn = nil, nil
	f.mu.Unlock()
	for _, tenant := range tenants {
		submitAdmitted(t, r, tenant+"-small", 7, 3)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	used := map[[2]int]bool{}
	for k := range f.generateOn {
		used[[2]int{0, f.generateOn[k]}], used[[2]int{1, f.prefillOn[k]}] = true, true
	}
	if !used[[2]int{0, 0}] || !used[[2]int{1, 0}] {
		t.Fatalf("small requests reserved on decodes %v, prefilled on %v: the small live peers took none", f.generateOn, f.prefillOn)
	}
}

// TestNoLivePeerFitsNamesTheLargestLimit: a request admitted just before
// the only decode that fit it died fits no live decode. It is refused
// before anything is reserved, with the limit of the largest live decode
// (what the client has to fit), every time.
func TestNoLivePeerFitsNamesTheLargestLimit(t *testing.T) {
	f := newFake()
	mid := engine.Limits{ContextLen: 384, MaxInputTokens: 300, PoolTokens: 768}
	decodeLimits(f, lowerLimits, mid)
	r, servers := f.start(t, 1, 3)
	servers[3].Close() // decode 2, the only one with a 512-token context
	waitFor(t, "the dead decode was never marked down", func() bool { return !r.Peers()[3].Up })
	if got := r.Limits(); got != mid {
		t.Fatalf("limits %+v, want the largest live decode's %+v", got, mid)
	}
	for i := 0; i < 2; i++ { // pairing rotates over the decodes; the error must not
		_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 450))
		if e := errkind.Of(err); e.Code != "context_length_exceeded" || !strings.Contains(e.Message, "context length is 384") {
			t.Fatalf("try %d: %v; want context_length_exceeded naming the largest live context, 384", i, err)
		}
	}
	if len(f.decodesAsked()) != 0 || len(f.prefillCalls()) != 0 {
		t.Fatalf("%d reservations and %d prefills for requests no live decode fits", len(f.decodesAsked()), len(f.prefillCalls()))
	}
}

// TestLimitsFollowLivePeers: the router's limits are those of the peers
// that can serve now. They fall when the larger decode dies and rise
// back when it returns; a small decode's death changes nothing, nor does
// its quota for a tenant bound that tenant any more. With no decode live
// the last known limits stay, and requests fail with 503; the first
// decode back sets them again.
func TestLimitsFollowLivePeers(t *testing.T) {
	f := newFake()
	decodeLimits(f, lowerLimits)
	prev := f.peerInfo
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		prev(role, i, in)
		if role == RoleDecode {
			in.TenantTokens = map[string]int{"umbrella": []int{64, 128}[i]}
		}
	}
	down := switchable(f, 2)
	r, _ := f.start(t, 1, 2)
	want := func(what string, lim engine.Limits, umbrella int) {
		t.Helper()
		waitFor(t, what, func() bool {
			n, _ := r.TenantTokens("umbrella")
			return r.Limits() == lim && n == umbrella
		})
	}
	want("limits at the handshake", fullLimits, 64)

	down[1].Store(true)
	want("the large decode died, but the limits did not fall", lowerLimits, 64)
	down[1].Store(false)
	want("the large decode returned, but the limits did not rise back", fullLimits, 64)
	submitAdmitted(t, r, "acme", 7, 300)

	down[0].Store(true)
	waitFor(t, "the small decode was never marked down", func() bool { return !r.Peers()[1].Up })
	want("the small decode died and changed the limits, or still bounds umbrella", fullLimits, 128)

	down[1].Store(true)
	waitFor(t, "the large decode was never marked down", func() bool { return !r.Peers()[2].Up })
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits %+v with no decode live, want the last known %+v", got, fullLimits)
	}
	if _, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3)); errkind.Of(err).Kind != errkind.Overload || errkind.Of(err).Code != "no_healthy_peer" {
		t.Fatalf("no decode live: %v; want 503 no_healthy_peer", err)
	}

	down[0].Store(false)
	want("the small decode returned alone, but the limits are not its own", lowerLimits, 64)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 300))
	if e := errkind.Of(err); e.Code != "context_length_exceeded" || !strings.Contains(e.Message, "context length is 256") {
		t.Fatalf("7+300 tokens with only the 256-token decode live: %v", err)
	}
	for _, on := range f.decodesAsked() {
		if on == 0 {
			t.Fatalf("reservations went to decodes %v; decode 0 fits none of them", f.decodesAsked())
		}
	}
}

// decodesAsked is the index of the decode server asked for each
// reservation so far.
func (f *fakeCluster) decodesAsked() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.generateOn...)
}
