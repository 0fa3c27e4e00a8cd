package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// fakeCluster is a set of httptest peers speaking peerapi. Prefill
// "transfers" by signalling the decode peer's pending id; decode then
// emits tokens 100.. and done. Hooks change behaviour per test.
type fakeCluster struct {
	mu        sync.Mutex
	transfers map[string]chan struct{} // id -> closed when prefill "sent" the KV
	cancels   map[string][]string      // role -> ids cancelled (acknowledged)
	prefills  []string                 // ids prefill was asked for
	generates []peerapi.GenerateRequest
	open      atomic.Int32 // generate streams still open

	// hooks
	reserveErr          *peerapi.Error                // decode refuses the reservation
	decodeFailsTransfer *peerapi.Error                // decode ends with this error once prefill was called
	fullFor             atomic.Int32                  // decode answers kv_pool_full to the first N reservations
	prefillErr          *peerapi.Error                // prefill fails with this (after "admission")
	prefillHold         chan struct{}                 // prefill blocks until closed (or cancel)
	dropAfter           int                           // decode drops the connection after this many tokens (0: never)
	cancelFails         atomic.Int32                  // the first N cancels answer 500
	tokens              int                           // tokens decode generates (default 3)
	tokenGap            time.Duration                 // decode pauses this long between tokens
	infoHook            func(*peerapi.Info)           // edit each info
	prefillLost         *peerapi.Error                // prefill transfers, then answers this error (an ACK it never got)
	prefillLostAfter    time.Duration                 // ... this long after the transfer
	readyDelay          time.Duration                 // decode waits this long after the transfer before `ready`
	decodeDelay         func(peerapi.GenerateRequest) // runs before reserving
	peerAuthFails       map[string]*atomic.Bool       // role -> its generate or prefill answers 401, as peerauth does for bad credentials
	options             func(*Options)                // edits the router's options in start
}

func newFake() *fakeCluster {
	return &fakeCluster{transfers: map[string]chan struct{}{}, cancels: map[string][]string{}, tokens: 3,
		peerAuthFails: map[string]*atomic.Bool{RolePrefill: new(atomic.Bool), RoleDecode: new(atomic.Bool)}}
}

func (f *fakeCluster) ch(id string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.transfers[id]
	if !ok {
		c = make(chan struct{})
		f.transfers[id] = c
	}
	return c
}

func (f *fakeCluster) cancelled(role string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancels[role]...)
}

func (f *fakeCluster) info(role string, i int) peerapi.Info {
	in := peerapi.Info{Role: role, Protocol: peerapi.Protocol, Model: "m", Fingerprint: "fp-1", Layers: 5, KVDim: 64, PageSize: 16,
		Limits: engine.Limits{ContextLen: 512, MaxInputTokens: 400, PoolTokens: 1024}}
	if role == RoleDecode {
		in.KVAddr = "127.0.0.1:1"
	}
	if f.infoHook != nil {
		f.infoHook(&in)
	}
	_ = i
	return in
}

func (f *fakeCluster) server(t *testing.T, role string, i int) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc(peerapi.PathInfo, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(f.info(role, i))
	})
	mux.HandleFunc(peerapi.PathCancel, func(w http.ResponseWriter, r *http.Request) {
		var req peerapi.CancelRequest
		json.NewDecoder(r.Body).Decode(&req)
		if f.cancelFails.Add(-1) >= 0 {
			http.Error(w, "try again", 500)
			return
		}
		f.mu.Lock()
		f.cancels[role] = append(f.cancels[role], req.ID)
		f.mu.Unlock()
		json.NewEncoder(w).Encode(peerapi.CancelResult{Known: true})
	})
	mux.HandleFunc(peerapi.PathPrefill, func(w http.ResponseWriter, r *http.Request) {
		if f.refusePeer(w, RolePrefill) {
			return
		}
		var req peerapi.PrefillRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.prefills = append(f.prefills, req.ID)
		hold := f.prefillHold
		f.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if f.prefillErr != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(peerapi.PrefillResult{Error: f.prefillErr})
			return
		}
		close(f.ch(req.ID))
		if f.prefillLost != nil {
			select {
			case <-time.After(f.prefillLostAfter):
			case <-r.Context().Done():
				return
			}
			json.NewEncoder(w).Encode(peerapi.PrefillResult{Error: f.prefillLost})
			return
		}
		json.NewEncoder(w).Encode(peerapi.PrefillResult{OK: true, FirstToken: 100})
	})
	mux.HandleFunc(peerapi.PathGenerate, func(w http.ResponseWriter, r *http.Request) {
		if f.refusePeer(w, RoleDecode) {
			return
		}
		var req peerapi.GenerateRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.generates = append(f.generates, req)
		f.mu.Unlock()
		f.open.Add(1)
		defer f.open.Add(-1)
		if f.decodeDelay != nil {
			f.decodeDelay(req)
		}
		enc := json.NewEncoder(w)
		send := func(ev peerapi.Event) {
			enc.Encode(ev)
			w.(http.Flusher).Flush()
		}
		if f.reserveErr != nil {
			send(peerapi.Event{Type: peerapi.EventError, Error: f.reserveErr})
			return
		}
		if f.fullFor.Add(-1) >= 0 {
			send(peerapi.Event{Type: peerapi.EventError, Error: &peerapi.Error{Kind: "overload", Code: "kv_pool_full", Message: "full"}})
			return
		}
		send(peerapi.Event{Type: peerapi.EventReserved})
		if f.decodeFailsTransfer != nil {
			for len(f.prefillCalls()) == 0 {
				time.Sleep(time.Millisecond)
			}
			send(peerapi.Event{Type: peerapi.EventError, Error: f.decodeFailsTransfer})
			return
		}
		select {
		case <-f.ch(req.ID):
		case <-r.Context().Done():
			return
		}
		time.Sleep(f.readyDelay)
		send(peerapi.Event{Type: peerapi.EventReady})
		for k := 0; k < f.tokens; k++ {
			if f.dropAfter > 0 && k == f.dropAfter {
				panic(http.ErrAbortHandler) // a dropped connection, not a clean end
			}
			send(peerapi.Event{Type: peerapi.EventTokens, Tokens: []int{100 + k}})
			if f.tokenGap > 0 {
				select {
				case <-time.After(f.tokenGap):
				case <-r.Context().Done():
					return
				}
			}
		}
		send(peerapi.Event{Type: peerapi.EventDone, Finish: engine.FinishLength,
			Usage: &engine.Usage{PromptTokens: len(req.Prompt), CompletionTokens: f.tokens}})
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// refusePeer answers 401 with peerauth's body when role's peerAuthFails
// is set.
func (f *fakeCluster) refusePeer(w http.ResponseWriter, role string) bool {
	if !f.peerAuthFails[role].Load() {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintln(w, `{"error":{"kind":"auth","code":"peer_unauthenticated","message":"this endpoint accepts only authenticated bulkhead peers"}}`)
	return true
}

func addr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// start makes np prefill and nd decode fake peers and a router over them.
func (f *fakeCluster) start(t *testing.T, np, nd int) (*Router, []*httptest.Server) {
	t.Helper()
	var o Options
	var servers []*httptest.Server
	for i := 0; i < np; i++ {
		s := f.server(t, RolePrefill, i)
		servers = append(servers, s)
		o.Prefill = append(o.Prefill, addr(s))
	}
	for i := 0; i < nd; i++ {
		s := f.server(t, RoleDecode, i)
		servers = append(servers, s)
		o.Decode = append(o.Decode, addr(s))
	}
	o.HealthEvery, o.StartWait, o.CancelGiveUp, o.TransferTimeout = 50*time.Millisecond, time.Second, 2*time.Second, 5*time.Second
	if f.options != nil {
		f.options(&o)
	}
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, servers
}

func admitted(t *testing.T, tenant string, n, maxTokens int) engine.Admitted {
	t.Helper()
	p := make([]int, n)
	for i := range p {
		p[i] = 1 + i
	}
	a, rej := engine.Admit(engine.Request{Tenant: tenant, Prompt: p, MaxTokens: maxTokens, Sampling: sample.Params{}}, engine.Limits{ContextLen: 512, MaxInputTokens: 512, PoolTokens: 512})
	if rej != nil {
		t.Fatal(rej)
	}
	return a
}

func drain(t *testing.T, st *engine.Stream) ([]int, engine.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var toks []int
	for {
		ts, res, err := st.Next(ctx)
		if err != nil {
			t.Fatal("stream did not end:", err)
		}
		toks = append(toks, ts...)
		if res != nil {
			return toks, *res
		}
	}
}

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
