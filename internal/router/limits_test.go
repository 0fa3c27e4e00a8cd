package router

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

var (
	fullLimits  = engine.Limits{ContextLen: 512, MaxInputTokens: 400, PoolTokens: 1024}
	lowerLimits = engine.Limits{ContextLen: 256, MaxInputTokens: 200, PoolTokens: 512}
)

// waitFor polls cond until it holds, failing the test with what after 3 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLimitsFollowAPeerRestart: a decode peer that goes away and comes
// back with lower limits (context, input, pool, a tenant's KV quota)
// lowers the router's admission limits before it takes requests again,
// and a peer that raises them again (seen by the periodic Info) raises
// them: the router never goes on admitting against the handshake's.
func TestLimitsFollowAPeerRestart(t *testing.T) {
	f := newFake()
	var restarted, down atomic.Bool
	f.peerInfo = func(role string, i int, in *peerapi.Info) {
		in.TenantTokens = map[string]int{"umbrella": 128}
		if role == RoleDecode && restarted.Load() {
			in.Limits = lowerLimits
			in.TenantTokens = map[string]int{"umbrella": 64}
		}
	}
	f.infoDown = func(role string, i int) bool { return role == RoleDecode && down.Load() }
	r, _ := f.start(t, 1, 1)
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits at the handshake %+v, want %+v", got, fullLimits)
	}

	down.Store(true)
	waitFor(t, "the restarting decode was never marked down", func() bool { return !r.Peers()[1].Up })
	restarted.Store(true)
	down.Store(false)
	waitFor(t, "the restarted decode never came back up", func() bool {
		up := r.Peers()[1].Up
		if up && r.Limits() != lowerLimits {
			t.Fatalf("the decode is up again with limits %+v, but the router still admits against %+v", lowerLimits, r.Limits())
		}
		return up
	})
	if n, ok := r.TenantTokens("umbrella"); !ok || n != 64 {
		t.Fatalf("umbrella's tokens after the restart: %d %v, want 64", n, ok)
	}
	req := engine.Request{Tenant: "acme", Prompt: make([]int, 7), MaxTokens: 300}
	if _, rej := engine.Admit(req, r.Limits()); rej == nil || rej.Code != "context_length_exceeded" {
		t.Fatalf("7+300 tokens against a 256-token context: %v", rej)
	}

	// Without a restart the router notices: each health check reads Info.
	restarted.Store(false)
	waitFor(t, "raised limits never reached the router", func() bool { return r.Limits() == fullLimits })
	if n, _ := r.TenantTokens("umbrella"); n != 128 {
		t.Fatalf("umbrella's tokens after the peer raised them: %d, want 128", n)
	}
}

// TestLengthRefusalRefreshesLimits: a decode peer restarted with a lower
// context between health checks refuses a request's length at
// reservation. The router asks it for its Info at once, and runs the
// request on the decode peer that still admits it instead of failing it:
// nothing was reserved by the refusal. The router's limits stay those of
// the larger decode, which still takes such requests.
func TestLengthRefusalRefreshesLimits(t *testing.T) {
	f, restarted := restartingPeer(RoleDecode, func(in *peerapi.Info) { in.Limits = lowerLimits })
	r, _ := f.start(t, 1, 2)
	restarted.Store(true)
	// Pairing alternates between the two idle decode peers, so one of these
	// goes to the restarted one first.
	runAll(t, r, []string{"acme", "acme"}, 7, 300)
	if got := r.Peers()[1].Limits; got != lowerLimits {
		t.Fatalf("the restarted decode's limits after its refusal %+v, want %+v", got, lowerLimits)
	}
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits after the refusal %+v, want the other decode's %+v", got, fullLimits)
	}
	if n := len(f.generates); n > 3 {
		t.Fatalf("%d reservations for 2 requests: the refusing peer was asked again", n)
	}
}

// TestPrefillLengthRefusalMovesToAnotherPrefill: a prefill peer restarted
// with a lower input limit refuses a prompt at its own admission, having
// computed and sent nothing. The router refreshes its limits and moves
// the prefill leg to a prefill peer that admits the prompt, under the
// same transfer id and decode reservation. The router's limits stay
// those of the other prefill, which still takes such prompts.
func TestPrefillLengthRefusalMovesToAnotherPrefill(t *testing.T) {
	f, restarted := restartingPeer(RolePrefill, func(in *peerapi.Info) { in.Limits.MaxInputTokens = 100 })
	r, _ := f.start(t, 2, 1)
	restarted.Store(true)
	runAll(t, r, []string{"acme", "globex"}, 150, 3) // one tenant would stick to one prefill
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.generates) != 2 || len(f.cancels[RoleDecode]) != 0 {
		t.Fatalf("%d reservations and decode cancels %v for 2 requests: the reservation was not kept for the other prefill", len(f.generates), f.cancels[RoleDecode])
	}
	if got := r.Peers()[0].Limits.MaxInputTokens; got != 100 {
		t.Fatalf("the restarted prefill's max_input_tokens after its refusal: %d, want 100", got)
	}
	if got := r.Limits(); got != fullLimits {
		t.Fatalf("limits after the refusal %+v, want the other prefill's %+v", got, fullLimits)
	}
	// At most one call reached the restarted prefill: after its refusal,
	// pairing skips it. Each request's transfer ran on prefill 1.
	on := map[int][]string{}
	for k, i := range f.prefillOn {
		on[i] = append(on[i], f.prefills[k])
	}
	if len(on[0]) > 1 || len(on[1]) != 2 || on[1][0] != f.generates[0].ID || on[1][1] != f.generates[1].ID {
		t.Fatalf("prefill 0 was asked for %v, prefill 1 for %v; reservations %s, %s", on[0], on[1], f.generates[0].ID, f.generates[1].ID)
	}
}

// TestUnreachablePrefillIsRetriedOnAnother: a prefill server that refuses
// connections (restarting, before health checks mark it down) never saw
// the request, so its prefill leg runs on another prefill server under
// the same reservation rather than failing with a 502.
func TestUnreachablePrefillIsRetriedOnAnother(t *testing.T) {
	f := newFake()
	f.options = func(o *Options) { o.HealthEvery = time.Hour } // only calls can notice the dead peer
	r, servers := f.start(t, 2, 1)
	servers[0].Close() // prefill 0: connection refused from now on
	// Pairing alternates between equally loaded prefills for tenants that
	// used none yet (one tenant would stick to the one that answered).
	runAll(t, r, []string{"acme", "globex", "initech", "umbrella"}, 3, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.generates) != 4 || len(f.cancels[RoleDecode]) != 0 {
		t.Fatalf("%d reservations and decode cancels %v for 4 requests: each should keep its one reservation", len(f.generates), f.cancels[RoleDecode])
	}
	for _, on := range f.prefillOn {
		if on != 1 {
			t.Fatalf("prefill calls went to %v; only prefill 1 can answer", f.prefillOn)
		}
	}
}

// A prefill server whose model file was written under it fails its
// requests with model_file_modified, having sent nothing, and stops within
// seconds. Its prefill legs run on another prefill server under the same
// reservation, instead of failing with its 500 until it is gone.
func TestPrefillWhoseModelChangedIsRetriedOnAnother(t *testing.T) {
	f := newFake()
	f.options = func(o *Options) { o.HealthEvery = time.Hour } // only calls can notice
	f.prefillFails = func(i int) *peerapi.Error {
		if i == 0 {
			return &peerapi.Error{Kind: "integrity", Code: "model_file_modified", Message: "the model file changed under the server"}
		}
		return nil
	}
	r, _ := f.start(t, 2, 1)
	runAll(t, r, []string{"acme", "globex", "initech", "umbrella"}, 3, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.generates) != 4 || len(f.cancels[RoleDecode]) != 0 {
		t.Fatalf("%d reservations and decode cancels %v for 4 requests: each should keep its one reservation", len(f.generates), f.cancels[RoleDecode])
	}
}

// TestPrefillLostAfterTheRequestIsNotRetried: a prefill server that took
// the request and then dropped the connection may have computed and sent
// KV already; the router never runs the same transfer on a second prefill
// server (which could race it into the reservation), and the request
// fails after decode's reservation was cancelled. (The call is
// replayable: when it was written on a kept-alive connection, the
// transport sends the same bytes once more to the same address on a fresh
// connection, which the server drops too; decode's Table takes one
// sender's connection per reservation, see Router.replayable.)
func TestPrefillLostAfterTheRequestIsNotRetried(t *testing.T) {
	f := newFake()
	f.prefillAbort.Store(true)
	f.options = func(o *Options) { o.HealthEvery = time.Hour }
	r, _ := f.start(t, 2, 1)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 3, 1))
	if e := errkind.Of(err); e.Kind != errkind.Unavailable {
		t.Fatalf("got %v, want an Unavailable error", err)
	}
	f.mu.Lock()
	calls, on := append([]string(nil), f.prefills...), append([]int(nil), f.prefillOn...)
	f.mu.Unlock()
	if len(calls) < 1 || len(calls) > 2 {
		t.Fatalf("prefill was asked %d times (%v) for one transfer; want once, or twice on a replayed kept-alive connection", len(calls), calls)
	}
	for k := range on {
		if on[k] != on[0] || calls[k] != calls[0] {
			t.Fatalf("prefill calls %v on servers %v: the transfer ran on a second prefill server", calls, on)
		}
	}
	if c := f.cancelled(RoleDecode); len(c) != 1 {
		t.Fatalf("decode cancels %v, want the one reservation", c)
	}
	waitZero(t, &f.open)
}

// restartingPeer is a fake cluster whose first peer of role announces the
// Info lower makes of its own once the returned flag is set, as a peer
// restarted with lower limits would. Health checks are an hour apart, so
// only a refusal can tell the router.
func restartingPeer(role string, lower func(*peerapi.Info)) (*fakeCluster, *atomic.Bool) {
	f := newFake()
	restarted := new(atomic.Bool)
	f.peerInfo = func(r string, i int, in *peerapi.Info) {
		if r == role && i == 0 && restarted.Load() {
			lower(in)
		}
	}
	f.options = func(o *Options) { o.HealthEvery = time.Hour }
	return f, restarted
}

// runAll runs one request per entry of tenants, prompt tokens and max new
// tokens each, and requires each to finish without an error.
func runAll(t *testing.T, r *Router, tenants []string, prompt, max int) {
	t.Helper()
	for i, tenant := range tenants {
		st, err := r.Submit(context.Background(), admitted(t, tenant, prompt, max))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, res := drain(t, st); res.Err != nil {
			t.Fatalf("request %d: %v", i, res.Err)
		}
	}
}
