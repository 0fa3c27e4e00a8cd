package router

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

func TestSuccessForwardsDecodeTokensAndResult(t *testing.T) {
	f := newFake()
	r, _ := f.start(t, 1, 1)
	st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if err != nil {
		t.Fatal(err)
	}
	toks, res := drain(t, st)
	if len(toks) != 3 || toks[0] != 100 || res.Err != nil || res.Finish != engine.FinishLength || res.Usage.PromptTokens != 7 {
		t.Fatalf("tokens %v result %+v", toks, res)
	}
	g := f.generates[0]
	if len(g.ID) != 32 || g.Tenant != "acme" || len(g.Prompt) != 7 || g.MaxTokens != 3 || f.prefills[0] != g.ID {
		t.Fatalf("generate %+v prefill ids %v", g, f.prefills)
	}
}

func TestTransferIDsAreFreshAndRandom(t *testing.T) {
	f := newFake()
	r, _ := f.start(t, 1, 1)
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		st, err := r.Submit(context.Background(), admitted(t, "acme", 3, 1))
		if err != nil {
			t.Fatal(err)
		}
		drain(t, st)
	}
	for _, g := range f.generates {
		if seen[g.ID] || len(g.ID) != 32 {
			t.Fatalf("transfer id %q repeated or malformed", g.ID)
		}
		seen[g.ID] = true
	}
}

func TestHandshakeRefusesMismatchedPeers(t *testing.T) {
	for name, edit := range map[string]func(*peerapi.Info){
		"fingerprint": func(i *peerapi.Info) { i.Fingerprint = "fp-" + i.Role },
		"kv_dim":      func(i *peerapi.Info) { i.KVDim = map[string]int{RolePrefill: 64, RoleDecode: 32}[i.Role] },
		"layers":      func(i *peerapi.Info) { i.Layers = map[string]int{RolePrefill: 5, RoleDecode: 6}[i.Role] },
		"kv_type":     func(i *peerapi.Info) { i.KVType = map[string]string{RolePrefill: "f16", RoleDecode: "f32"}[i.Role] },
		"protocol":    func(i *peerapi.Info) { i.Protocol = map[string]int{RolePrefill: 1, RoleDecode: 2}[i.Role] },
		"role":        func(i *peerapi.Info) { i.Role = RoleDecode },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			f.infoHook = edit
			p, d := f.server(t, RolePrefill, 0), f.server(t, RoleDecode, 0)
			_, err := New(context.Background(), Options{Prefill: []string{addr(p)}, Decode: []string{addr(d)}, StartWait: time.Second})
			if err == nil {
				t.Fatal("a mismatched pair was accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "refusing to start") || (!strings.Contains(msg, addr(d)) && !strings.Contains(msg, addr(p))) {
				t.Fatalf("error does not name the peer: %v", err)
			}
			t.Log(msg)
		})
	}
	// The router's own model must match too.
	f := newFake()
	p, d := f.server(t, RolePrefill, 0), f.server(t, RoleDecode, 0)
	if _, err := New(context.Background(), Options{Prefill: []string{addr(p)}, Decode: []string{addr(d)}, Fingerprint: "other"}); err == nil || !strings.Contains(err.Error(), "router's model") {
		t.Fatalf("router fingerprint mismatch: %v", err)
	}
	// An unreachable peer fails the start, by name.
	if _, err := New(context.Background(), Options{Prefill: []string{addr(p)}, Decode: []string{"127.0.0.1:1"}, StartWait: 300 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable peer: %v", err)
	}
}

func TestLimitsAreTheMinimumOverPeers(t *testing.T) {
	f := newFake()
	f.infoHook = func(i *peerapi.Info) {
		if i.Role == RolePrefill {
			i.Limits = engine.Limits{ContextLen: 512, MaxInputTokens: 100, PoolTokens: 4096}
		} else {
			i.Limits = engine.Limits{ContextLen: 300, MaxInputTokens: 400, PoolTokens: 2048}
		}
	}
	r, _ := f.start(t, 1, 1)
	if got, want := r.Limits(), (engine.Limits{ContextLen: 300, MaxInputTokens: 100, PoolTokens: 2048}); got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
}

func TestPrefillErrorIsReturnedAfterDecodeCancelled(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "bad_input", Code: "context_length_exceeded", Message: "prompt has 7 tokens; prefill accepts 6", Param: "messages"}
	f.cancelFails.Store(2) // the cancel is retried until acknowledged
	r, _ := f.start(t, 1, 1)
	st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if st != nil || err == nil {
		t.Fatal("a failed prefill gave a stream")
	}
	e := errkind.Of(err)
	if e.Kind != errkind.BadInput || e.Code != "context_length_exceeded" || e.Message != f.prefillErr.Message || e.Param != "messages" {
		t.Fatalf("got %+v, want prefill's original error", e)
	}
	if c := f.cancelled(RoleDecode); len(c) != 1 || c[0] != f.generates[0].ID {
		t.Fatalf("decode cancels %v, want the reservation %s", c, f.generates[0].ID)
	}
	waitZero(t, &f.open)
}

// TestPeerProtocolErrorIsNotTheClients: a prefill whose transfer failed
// on a protocol violation (BadInput inside the protocol) is a failure
// between the servers; the client gets a 502, not a 400 for a request it
// sent correctly. Context-length refusals stay the client's (above).
func TestPeerProtocolErrorIsNotTheClients(t *testing.T) {
	for _, code := range []string{"transfer_protocol", "transfer_unknown_id", "transfer_replayed_id"} {
		f := newFake()
		f.prefillErr = &peerapi.Error{Kind: "bad_input", Code: code, Message: "kv transfer: frame seq 9 out of range"}
		r, _ := f.start(t, 1, 1)
		st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
		if st != nil || err == nil {
			t.Fatal("a failed prefill gave a stream")
		}
		if e := errkind.Of(err); e.Kind != errkind.Unavailable || e.Code != code || e.Message != f.prefillErr.Message {
			t.Fatalf("%s: got %+v, want an Unavailable error keeping the peer's code and message", code, e)
		}
	}
}

func TestReservationRefusedStopsThere(t *testing.T) {
	f := newFake()
	f.reserveErr = &peerapi.Error{Kind: "quota", Code: "tenant_kv_quota", Message: "over quota"}
	r, _ := f.start(t, 1, 1)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Kind != errkind.Quota || e.Code != "tenant_kv_quota" {
		t.Fatalf("got %v", err)
	}
	if len(f.prefills) != 0 || len(f.cancelled(RoleDecode)) != 0 {
		t.Fatalf("prefill called %v / cancels %v after a refused reservation", f.prefills, f.cancelled(RoleDecode))
	}
}

func TestDroppedDecodeIsUnavailableNeverAFinish(t *testing.T) {
	f := newFake()
	f.tokens, f.dropAfter = 5, 2
	r, _ := f.start(t, 1, 1)
	st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 5))
	if err != nil {
		t.Fatal(err)
	}
	_, res := drain(t, st)
	if res.Finish != "" || res.Err == nil || res.Err.Kind != errkind.Unavailable {
		t.Fatalf("result %+v, want an Unavailable error and no finish", res)
	}
}

func TestClientCancelDuringPrefillCancelsBothLegs(t *testing.T) {
	f := newFake()
	f.prefillHold = make(chan struct{})
	defer close(f.prefillHold)
	r, _ := f.start(t, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(f.prefillCalls()) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := r.Submit(ctx, admitted(t, "acme", 7, 3))
	if errkind.Of(err).Code != "request_cancelled" {
		t.Fatalf("got %v", err)
	}
	id := f.generates[0].ID
	if d, p := f.cancelled(RoleDecode), f.cancelled(RolePrefill); len(d) != 1 || d[0] != id || len(p) != 1 || p[0] != id {
		t.Fatalf("cancels decode %v prefill %v, want %s on both", d, p, id)
	}
	waitZero(t, &f.open)
}

func (f *fakeCluster) prefillCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.prefills...)
}

func TestClientCancelMidStreamCancelsBothLegs(t *testing.T) {
	f := newFake()
	f.tokens, f.tokenGap = 400, 5*time.Millisecond // 2 s of tokens: the cancel lands mid-stream
	r, _ := f.start(t, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := r.Submit(ctx, admitted(t, "acme", 7, 400))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_, res := drain(t, st)
	if res.Err == nil || res.Finish != "" {
		t.Fatalf("result %+v after cancel", res)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(f.cancelled(RoleDecode)) == 0 || len(f.cancelled(RolePrefill)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no acknowledged cancel on both legs")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeastLoadedAndDownPeersAvoided(t *testing.T) {
	f := newFake()
	r, servers := f.start(t, 2, 2)
	// Spread: two concurrent holds land on different decode peers.
	f.mu.Lock()
	f.prefillHold = make(chan struct{})
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, tenant := range []string{"acme", "globex"} { // one tenant would stick to its prefill
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := r.Submit(context.Background(), admitted(t, tenant, 3, 1)); err == nil {
				drain(t, st)
			}
		}()
	}
	for len(f.prefillCalls()) < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	busy := map[string]int{}
	for _, s := range r.Peers() {
		busy[s.Role] += min(s.Inflight, 1)
	}
	if busy[RoleDecode] != 2 || busy[RolePrefill] != 2 {
		t.Fatalf("concurrent requests did not spread: %+v", r.Peers())
	}
	close(f.prefillHold)
	wg.Wait()
	f.mu.Lock()
	f.prefillHold = nil
	f.mu.Unlock()

	// Kill decode 0: health checks mark it down and requests avoid it.
	servers[2].Close()
	deadline := time.Now().Add(3 * time.Second)
	for r.Peers()[2].Up {
		if time.Now().After(deadline) {
			t.Fatal("a dead peer was never marked down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 4; i++ {
		st, err := r.Submit(context.Background(), admitted(t, "acme", 3, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, res := drain(t, st); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// With every decode down, requests fail at once with 503.
	servers[3].Close()
	for r.Peers()[3].Up {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := r.Submit(context.Background(), admitted(t, "acme", 3, 1)); errkind.Of(err).Kind != errkind.Overload {
		t.Fatalf("no decode up: %v", err)
	}
}

func waitZero(t *testing.T, n *atomic.Int32) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d generate streams still open", n.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A full decode pool is waited out (new id, new try), like serve's queue;
// nothing is held in between.
func TestFullDecodeIsRetriedWithFreshIDs(t *testing.T) {
	f := newFake()
	f.fullFor.Store(3)
	r, _ := f.start(t, 1, 1)
	st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, res := drain(t, st); res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(f.generates) != 4 || len(f.prefillCalls()) != 1 || f.generates[0].ID == f.generates[3].ID {
		t.Fatalf("%d reservations, %d prefills", len(f.generates), len(f.prefillCalls()))
	}
}

// When prefill only saw its KV connection drop but decode says why (an
// integrity failure), the client gets decode's error: the first real one.
func TestDecodeIntegrityBeatsPrefillConnectionLoss(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "unavailable", Code: "transfer_peer_lost", Message: "decode connection lost"}
	f.decodeFailsTransfer = &peerapi.Error{Kind: "integrity", Code: "transfer_digest_mismatch", Message: "digest mismatch"}
	r, _ := f.start(t, 1, 1)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Kind != errkind.Integrity || e.Code != "transfer_digest_mismatch" {
		t.Fatalf("got %v, want decode's integrity error", err)
	}
}

// A decode server that stopped taking connections (restarting, or
// draining before a restart) while health checks still count it up:
// nothing can be reserved on it, so the request goes to another decode
// server instead of failing with a 502 (the failed calls count towards
// marking it down).
func TestUnreachableDecodeIsRetriedOnAnother(t *testing.T) {
	f := newFake()
	f.options = func(o *Options) { o.HealthEvery = time.Hour } // only calls can notice the dead peer
	r, servers := f.start(t, 1, 2)
	servers[1].Close()       // decode 0: connection refused from now on
	for i := 0; i < 4; i++ { // pairing alternates between equally loaded decodes
		st, err := r.Submit(context.Background(), admitted(t, "acme", 3, 1))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, res := drain(t, st); res.Err != nil {
			t.Fatalf("request %d: %v", i, res.Err)
		}
	}
}

// TestTenantTokensAreTheMinimumOverPeers: a tenant with a KV page quota on
// any peer is bounded by the smallest one, so the API sizes a request that
// sends no max_tokens to fit it; a tenant with no quota anywhere has none.
func TestTenantTokensAreTheMinimumOverPeers(t *testing.T) {
	f := newFake()
	f.infoHook = func(i *peerapi.Info) {
		if i.Role == RolePrefill {
			i.TenantTokens = map[string]int{"umbrella": 64, "initech": 256}
		} else {
			i.TenantTokens = map[string]int{"umbrella": 128}
		}
	}
	r, _ := f.start(t, 1, 1)
	var _ engine.TenantLimiter = r
	for tenant, want := range map[string]int{"umbrella": 64, "initech": 256} {
		if n, ok := r.TenantTokens(tenant); !ok || n != want {
			t.Errorf("%s: %d %v, want %d", tenant, n, ok, want)
		}
	}
	if _, ok := r.TenantTokens("acme"); ok {
		t.Error("acme has no quota on any peer, but a limit")
	}
}
