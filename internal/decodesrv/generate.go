package decodesrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/server"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// requestTag marks the kv.Owner request numbers of reservations, so they
// can never equal an engine request number on the same pool.
const requestTag = 1 << 63

var errCancelled = errkind.New(errkind.Unavailable, transfer.CodeCancelled, "the router cancelled the request")

// eventWriter writes NDJSON events, flushing each one, and remembers the
// first write failure (the router went away).
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
	// ending, when set, runs once before the stream's last event (an
	// error or done) is written: what the request registered (its cancel
	// entry, its tenant's slot) is gone by the time the router can read
	// that it ended, so a cancel the router sends after that finds nothing
	// (Known false), never a stale entry, and the tenant's next request
	// finds the slot free.
	ending func()
}

func (e *eventWriter) send(ev peerapi.Event) error {
	if f := e.ending; f != nil && (ev.Type == peerapi.EventError || ev.Type == peerapi.EventDone) {
		e.ending = nil
		f()
	}
	if e.err != nil {
		return e.err
	}
	if e.err = json.NewEncoder(e.w).Encode(ev); e.err == nil {
		e.err = e.rc.Flush()
	}
	return e.err
}

func (e *eventWriter) fail(err error) {
	e.send(peerapi.Event{Type: peerapi.EventError, Error: peerapi.FromError(err)})
}

// handleGenerate reserves pages, waits for the verified KV, then decodes.
// Every answer is a 200 NDJSON stream; a failure at any point is an error
// event carrying the original error. The router closing the connection
// cancels the request wherever it stands.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
	var req peerapi.GenerateRequest
	if err := readJSON(w, r, s.body, &req); err != nil {
		ev.fail(err)
		return
	}
	id, a, err := s.admit(req)
	if err != nil {
		ev.fail(err)
		return
	}
	// The prefill the router chose: only it may open the transfer. Empty
	// is a router that names none (any prefill may); anything else that
	// does not parse is refused, never taken as naming no one.
	var sender transfer.Identity
	if req.PrefillIdentity != "" {
		if sender, err = transfer.ParseIdentity(req.PrefillIdentity); err != nil {
			ev.fail(errkind.Wrap(errkind.BadInput, "invalid_request", err, err.Error()))
			return
		}
	}
	// The tenant's concurrent-request limit, before anything is reserved:
	// a request refused only by the engine would have had prefill compute
	// and ship its whole prompt first (see tenantSlots). The slot is given
	// back before the stream's last event is written (ending), so the
	// router, which may retry a refusal at once or start the tenant's next
	// request as soon as it reads that event, never meets a slot this
	// request no longer needs; the deferred release covers a stream that
	// ends without one (the router gone).
	release, qerr := s.slots.take(req.Tenant)
	if qerr != nil {
		ev.fail(qerr)
		return
	}
	defer release()
	ev.ending = release
	n, maxNew := len(req.Prompt), req.MaxTokens

	// The engine request's context: the router's connection, or an
	// explicit cancel.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	router := routerIdentity(r)
	rs, err := s.reserve(id, req.Tenant, n, maxNew, sender, router)
	if err != nil {
		ev.fail(err)
		return
	}
	s.mu.Lock()
	s.active[id] = activeRequest{cancel: cancel, router: router}
	s.mu.Unlock()
	unregister := func() {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
	}
	ev.ending = func() { unregister(); release() }
	defer unregister()
	if ev.send(peerapi.Event{Type: peerapi.EventReserved}) != nil {
		cancel()
	}

	var out outcome
	select {
	case out = <-rs.outcome:
	case <-ctx.Done():
		// An explicit, acknowledged cancel: the Table aborts the stream
		// (never mid-frame) and frees the pages once writes drained. This
		// request made the reservation, so its end is decode's own cancel
		// (Local), whichever router asked.
		s.call(func() {
			s.step(transfer.Cancel{ID: id, Reason: errCancelled, Local: true})
		})
		select {
		case out = <-rs.outcome:
			if out.ready {
				rs.seq.Free() // verified just before the cancel: ours to free
			} else if out.err != nil {
				// The Table's verdict: the cancel itself, or a failure
				// that came first (a corrupted frame, say), which the
				// router's cancel only echoes.
				ev.fail(transferFailure(out.err))
				return
			}
		default:
		}
		ev.fail(errCancelled) // heard only if the router asked by POST cancel
		return
	}
	if !out.ready {
		ev.fail(transferFailure(out.err))
		return
	}
	seq := rs.seq
	if out.tokens != n {
		// The Table already checked this; a second look costs nothing.
		seq.Free()
		ev.fail(errkind.New(errkind.Integrity, transfer.CodeCount, "kv transfer verified %d tokens for a %d-token prompt", out.tokens, n))
		return
	}
	first := int(out.first)
	if first < 0 || first >= s.Model.Config.Vocab {
		seq.Free()
		ev.fail(errkind.New(errkind.Integrity, "transfer_bad_first_token", "kv transfer carried first token %d outside the vocabulary", first))
		return
	}
	// The engine emits a prefilled request's first token unconditionally
	// and then decodes at least once more, so the two cases where the
	// first token is also the last are finished here.
	switch {
	case s.Model.IsEnd(first):
		seq.Free()
		ev.send(peerapi.Event{Type: peerapi.EventReady})
		ev.send(peerapi.Event{Type: peerapi.EventDone, Finish: engine.FinishStop, Usage: &engine.Usage{PromptTokens: n}})
		return
	case maxNew == 1:
		seq.Free()
		ev.send(peerapi.Event{Type: peerapi.EventReady})
		ev.send(peerapi.Event{Type: peerapi.EventTokens, Tokens: []int{first}, Logprobs: wireLogprobs(a.Request().Sampling.Logprobs, 1, nil)})
		ev.send(peerapi.Event{Type: peerapi.EventDone, Finish: engine.FinishLength, Usage: &engine.Usage{PromptTokens: n, CompletionTokens: 1}})
		return
	}
	st, err := s.Engine.SubmitPrefilled(ctx, a, seq, first)
	if err != nil {
		seq.Free() // idempotent: some refusals free it already, some do not
		ev.fail(err)
		return
	}
	// However this handler ends, the engine request is cancelled and its
	// end awaited before the tenant's slot is given back (the deferred
	// release runs after this; ending, before the last event, comes only
	// once the engine ended the request): released while the engine still
	// held the request, the slot would let the tenant's next request
	// through here, only for the engine's own count to refuse it after its
	// whole transfer.
	defer func() {
		cancel()
		awaitEnd(st)
	}()
	if ev.send(peerapi.Event{Type: peerapi.EventReady}) != nil {
		return // the deferred cancel stops the engine request
	}
	logprobs := a.Request().Sampling.Logprobs
	for {
		toks, lps, res, err := st.NextWith(ctx)
		if err != nil {
			cancel() // ctx is done already; this only says so
			awaitEnd(st)
			ev.fail(errCancelled)
			return
		}
		if len(toks) > 0 && ev.send(peerapi.Event{Type: peerapi.EventTokens, Tokens: toks, Logprobs: wireLogprobs(logprobs, len(toks), lps)}) != nil {
			return
		}
		if res != nil {
			if res.Err != nil {
				ev.fail(res.Err)
			} else {
				u := res.Usage
				ev.send(peerapi.Event{Type: peerapi.EventDone, Finish: res.Finish, Usage: &u})
			}
			return
		}
	}
}

// awaitEnd waits until the engine has ended st's request. The engine
// ends every request it accepted, a cancelled one at its next step and
// all of them when it stops, so this wait is bounded by the engine's.
func awaitEnd(st *engine.Stream) {
	for {
		if _, res, _ := st.Next(context.Background()); res != nil {
			return
		}
	}
}

// transferFailure is the error the router hears for a transfer that
// failed here. Decode is the side that verifies the KV, so an integrity
// failure (checksum, count, coverage, digest, tenant) says in words that
// the transfer failed an integrity check before the protocol's detail:
// the router gives it to the client, with its 500.
func transferFailure(e *errkind.Error) *errkind.Error {
	if e.Kind != errkind.Integrity {
		return e
	}
	return &errkind.Error{Kind: e.Kind, Code: e.Code, Param: e.Param, Err: e,
		Message: "the KV transfer for this request failed an integrity check, so nothing was generated: " + strings.TrimPrefix(e.Message, "kv transfer: ")}
}

// admit checks a generate request against this server's own limits
// before anything is reserved.
func (s *Server) admit(req peerapi.GenerateRequest) (transfer.ID, engine.Admitted, error) {
	id, a, err := server.AdmitPeer(req.ID, req.Tenant, req.Prompt, req.MaxTokens, req.Sampling, s.Model.Config.Vocab, s.limits)
	if err != nil {
		return id, a, err
	}
	// Pages are reserved before the engine sees the request, so the
	// engine's quota check must run here first.
	if rej := engine.TenantPagesFit(s.Pool, a.Request()); rej != nil {
		return id, engine.Admitted{}, rej
	}
	return id, a, nil
}

// reserve allocates the whole sequence for n+maxNew tokens (all or
// nothing) and registers the reservation with the Table, on the loop,
// for sender to fill (zero: any prefill), as router's: only router may
// rename its sender or cancel it.
func (s *Server) reserve(id transfer.ID, tenant string, n, maxNew int, sender, router transfer.Identity) (*reservation, error) {
	var rs *reservation
	var rerr error
	ok := s.call(func() {
		if err := s.table.Check(id); err != nil {
			rerr = err
			return
		}
		seq, err := s.Pool.Alloc(kv.Owner{Tenant: tenant, Request: requestTag | s.nextReq.Add(1)}, n+maxNew)
		if err != nil {
			rerr = poolError(err)
			return
		}
		timeout := s.cfg.Peers.TransferTimeout
		if timeout <= 0 {
			timeout = 30
		}
		err = s.table.Reserve(transfer.Reservation{
			ID: id, Tenant: tenant, Tokens: n, MaxNew: maxNew, Layers: s.layers, KVDim: s.kvDim,
			Deadline: s.now() + secs(timeout), Window: s.cfg.Peers.Window, MaxFrameBytes: s.cfg.Peers.FrameBytes,
			Sender: sender, Router: router,
		})
		if err != nil {
			seq.Free()
			rerr = err
			return
		}
		rs = &reservation{seq: seq, outcome: make(chan outcome, 1)}
		s.res[id] = rs
		s.live.Store(int64(s.table.Live()))
		s.tm.Started.Inc()
	})
	if !ok {
		return nil, errkind.New(errkind.Overload, "shutting_down", "the decode server is shutting down")
	}
	return rs, rerr
}

// poolError classifies a failed allocation. No room is a load condition:
// the request fails (the router may retry elsewhere), never a partial
// reservation.
func poolError(err error) error {
	switch {
	case errors.Is(err, kv.ErrPoolFull):
		return errkind.Wrap(errkind.Overload, "kv_pool_full", err, "the decode server's KV pool has no room for this request now")
	case errors.Is(err, kv.ErrQuota):
		return errkind.Wrap(errkind.Quota, "kv_quota_exceeded", err, "this tenant holds its whole KV page quota on the decode server")
	}
	return errkind.Wrap(errkind.Internal, "internal_error", err, "could not reserve KV pages")
}

func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if limit <= 0 {
		limit = 1 << 20
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields() // a router newer than this server: refuse what it cannot honour
	if err := dec.Decode(v); err != nil {
		return errkind.Wrap(errkind.BadInput, "invalid_request", err, fmt.Sprintf("the request body is not valid JSON for %s: %v", r.URL.Path, err))
	}
	return nil
}

// wireLogprobs is the Logprobs of an event of n tokens whose log
// probabilities are lps (entry for entry, nil where unknown: the first
// token's, which the prefill server has): nothing when the request did not
// ask for them.
func wireLogprobs(asked bool, n int, lps []*sample.Logprobs) []*peerapi.Logprobs {
	if !asked {
		return nil
	}
	out := make([]*peerapi.Logprobs, n)
	for i := range out {
		if i < len(lps) {
			out[i] = peerapi.FromLogprobs(lps[i])
		}
	}
	return out
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
