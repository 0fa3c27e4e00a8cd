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
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// fakeCluster is a set of httptest peers speaking peerapi. Prefill
// "transfers" by signalling the decode peer's pending id; decode then
// emits tokens 100.. and done. Hooks change behaviour per test.
type fakeCluster struct {
	mu         sync.Mutex
	transfers  map[string]chan struct{} // id -> closed when prefill "sent" the KV
	cancels    map[string][]string      // role -> ids cancelled (acknowledged)
	prefills   []string                 // ids prefill was asked for
	prefillOn  []int                    // ... and the index of the prefill server asked, in the same order
	generates  []peerapi.GenerateRequest
	generateOn []int                   // the index of the decode server asked for each of generates
	expects    []peerapi.ExpectRequest // a reservation moved to another prefill
	// prefillNamed is, for each of prefills, the prefill identity decode's
	// reservation named when the PREFILL call arrived (its generate's,
	// or the last expect's).
	prefillNamed []string
	open         atomic.Int32 // generate streams still open

	// hooks
	reserveErr          *peerapi.Error                             // decode refuses the reservation
	decodeFailsTransfer *peerapi.Error                             // decode ends with this error once prefill was called
	fullFor             atomic.Int32                               // decode answers kv_pool_full to the first N reservations
	prefillErr          *peerapi.Error                             // prefill fails with this (after "admission"), 200 as prefillsrv answers
	prefillFails        func(i int) *peerapi.Error                 // prefill i answers this, 200 and nothing sent, as prefillsrv does for its engine's failure
	prefillHold         chan struct{}                              // prefill blocks until closed (or cancel)
	dropAfter           int                                        // decode drops the connection after this many tokens (0: never)
	cancelFails         atomic.Int32                               // the first N cancels answer 500
	tokens              int                                        // tokens decode generates (default 3)
	tokenGap            time.Duration                              // decode pauses this long between tokens
	infoHook            func(*peerapi.Info)                        // edit each info
	prefillLost         *peerapi.Error                             // prefill transfers, then answers this error (an ACK it never got)
	prefillLostAfter    time.Duration                              // ... this long after the transfer
	readyDelay          time.Duration                              // decode waits this long after the transfer before `ready`
	decodeDelay         func(peerapi.GenerateRequest)              // runs before reserving
	peerAuthFails       map[string]*atomic.Bool                    // role -> its generate or prefill answers 401, as peerauth does for bad credentials
	peerRoleRefused     atomic.Bool                                // with peerAuthFails: 403 peer_role_forbidden instead, as peerauth does for a certificate of another role
	options             func(*Options)                             // edits the router's options in start
	peerInfo            func(role string, i int, in *peerapi.Info) // edits one peer's info, after infoHook
	infoDown            func(role string, i int) bool              // that peer's info answers 503
	prefillAbort        atomic.Bool                                // prefill drops the connection after reading the request
	expectRefused       atomic.Bool                                // decode answers every expect 409, as for an opened transfer
	prefillAnswerDelay  time.Duration                              // prefill answers OK this long after the transfer (decode's tokens overtake it)
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
	if f.peerInfo != nil {
		f.peerInfo(role, i, &in)
	}
	return in
}

// admit is the fake peer's own admission, against the limits it
// announces now, as a real peer's is.
func (f *fakeCluster) admit(role string, i int, req engine.Request) *peerapi.Error {
	if _, rej := engine.Admit(req, f.info(role, i).Limits); rej != nil {
		return peerapi.FromError(rej)
	}
	return nil
}

func (f *fakeCluster) server(t *testing.T, role string, i int) *httptest.Server {
	s := httptest.NewServer(f.handler(role, i))
	t.Cleanup(s.Close)
	return s
}

// handler is the control API of f's peer i of role.
func (f *fakeCluster) handler(role string, i int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(peerapi.PathInfo, func(w http.ResponseWriter, r *http.Request) {
		if f.infoDown != nil && f.infoDown(role, i) {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
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
	mux.HandleFunc(peerapi.PathExpect, func(w http.ResponseWriter, r *http.Request) {
		var req peerapi.ExpectRequest
		json.NewDecoder(r.Body).Decode(&req)
		if f.expectRefused.Load() {
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"error": &peerapi.Error{Kind: "bad_input", Code: "transfer_protocol", Message: "transfer was already opened"}})
			return
		}
		f.mu.Lock()
		f.expects = append(f.expects, req)
		f.mu.Unlock()
		json.NewEncoder(w).Encode(peerapi.ExpectResult{OK: true})
	})
	mux.HandleFunc(peerapi.PathPrefill, func(w http.ResponseWriter, r *http.Request) {
		if f.refusePeer(w, RolePrefill) {
			return
		}
		var req peerapi.PrefillRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.prefills = append(f.prefills, req.ID)
		f.prefillOn = append(f.prefillOn, i)
		f.prefillNamed = append(f.prefillNamed, f.namedLocked(req.ID))
		hold := f.prefillHold
		f.mu.Unlock()
		if f.prefillAbort.Load() {
			panic(http.ErrAbortHandler) // the request arrived; the answer never does
		}
		if e := f.admit(RolePrefill, i, engine.Request{Tenant: req.Tenant, Prompt: req.Prompt, MaxTokens: req.MaxTokens}); e != nil {
			// As prefillsrv answers its own admission: 200, nothing sent.
			json.NewEncoder(w).Encode(peerapi.PrefillResult{Error: e})
			return
		}
		if f.prefillFails != nil {
			if e := f.prefillFails(i); e != nil {
				json.NewEncoder(w).Encode(peerapi.PrefillResult{Error: e})
				return
			}
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if f.prefillErr != nil {
			// As prefillsrv answers every request it understood
			// (handlePrefill): 200 with the error in the result; only a
			// body that is not a PrefillRequest gets a 400.
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
		select {
		case <-time.After(f.prefillAnswerDelay):
		case <-r.Context().Done():
			return
		}
		res := peerapi.PrefillResult{OK: true, FirstToken: 100}
		if req.Sampling.Logprobs {
			res.FirstLogprobs = fakeLogprobs(100)
		}
		json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc(peerapi.PathGenerate, func(w http.ResponseWriter, r *http.Request) {
		if f.refusePeer(w, RoleDecode) {
			return
		}
		var req peerapi.GenerateRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.generates = append(f.generates, req)
		f.generateOn = append(f.generateOn, i)
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
		if e := f.admit(RoleDecode, i, engine.Request{Tenant: req.Tenant, Prompt: req.Prompt, MaxTokens: req.MaxTokens}); e != nil {
			send(peerapi.Event{Type: peerapi.EventError, Error: e})
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
			ev := peerapi.Event{Type: peerapi.EventTokens, Tokens: []int{100 + k}}
			if req.Sampling.Logprobs {
				// The first token is the prefill's: decode knows
				// nothing of its log probabilities.
				ev.Logprobs = []*peerapi.Logprobs{nil}
				if k > 0 {
					ev.Logprobs[0] = fakeLogprobs(100 + k)
				}
			}
			send(ev)
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
	return mux
}

// namedLocked is the prefill identity decode's reservation id names now:
// the last expect's, else its generate's (f.mu held).
func (f *fakeCluster) namedLocked(id string) string {
	for k := len(f.expects) - 1; k >= 0; k-- {
		if f.expects[k].ID == id {
			return f.expects[k].PrefillIdentity
		}
	}
	for _, g := range f.generates {
		if g.ID == id {
			return g.PrefillIdentity
		}
	}
	return ""
}

// refusePeer answers 401 with peerauth's body when role's peerAuthFails
// is set (403, for a certificate of another role, with peerRoleRefused).
func (f *fakeCluster) refusePeer(w http.ResponseWriter, role string) bool {
	if !f.peerAuthFails[role].Load() {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	if f.peerRoleRefused.Load() {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintln(w, `{"error":{"kind":"auth","code":"peer_role_forbidden","message":"peer role refused: the client presented a certificate with role prefill; /peer/v1/generate needs a certificate with role router"}}`)
		return true
	}
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

// fakeLogprobs is the fake peers' log probabilities of token tok.
func fakeLogprobs(tok int) *peerapi.Logprobs {
	lp := peerapi.Float(-float32(tok) / 100)
	return &peerapi.Logprobs{Token: tok, Logprob: lp, Top: []peerapi.TokenLogprob{{Token: tok, Logprob: lp}}}
}
