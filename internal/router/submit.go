package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// decodeGrace is how long the router waits for prefill's answer once
// decode has failed the transfer: prefill normally reports the same
// failure (decode aborted it) within a round trip, and its error is the
// one the client should see; if it does not, decode's error is.
const decodeGrace = 2 * time.Second

// causeWait is how long a failed prefill waits for decode's word on the
// same transfer (see verdict).
const causeWait = 300 * time.Millisecond

// exchange is one request's run on one pair.
type exchange struct {
	r    *Router
	d, p *peer
	id   string
	// sender is the identity of the prefill decode's reservation names
	// (x.p's when it was made; retryPrefill moves it with the leg).
	sender transfer.Identity
	req    engine.Request
	st     *engine.Stream
	legs   context.CancelFunc // closes both control connections
	lctx   context.Context
	resv   chan *errkind.Error // decode's answer to the reservation: nil = reserved
	ready  chan struct{}       // closed when decode said `ready`: KV verified, decoding started
	term   chan engine.Result  // decode's final word, after reserved
	early  *engine.Result      // term, when it came before prefill answered
	pout   chan prefillAnswer  // prefill's answer; its err nil = transferred and acknowledged
	closed sync.Once
	rdy    sync.Once
	// first is the first token's log probabilities, from the prefill
	// server's answer (decode cannot know them), for a request that asked
	// for them; firstSet is closed once the answer is in (first nil if it
	// did not come). settle sets them, once.
	first    *sample.Logprobs
	firstSet chan struct{}
	settled  sync.Once
}

// Submit runs an admitted request: reserve on the least-loaded decode
// peer, then prefill on the least-loaded prefill peer, then stream
// decode's tokens. It returns once the transfer verified (prefill's
// acknowledged answer, or decode's `ready`); any failure before that is
// returned here (the first real error, see verdict) after the other leg
// was cancelled, so a failed Submit holds nothing anywhere.
func (r *Router) Submit(ctx context.Context, a engine.Admitted) (*engine.Stream, error) {
	if !a.Valid() {
		return nil, errkind.New(errkind.Internal, "not_admitted", "router: a request that was never admitted was submitted")
	}
	if r.ctx.Err() != nil {
		return nil, errkind.Wrap(errkind.Overload, "shutting_down", errClosed, "the server is shutting down")
	}
	req := a.Request()
	x, err := r.reserve(ctx, req)
	if err != nil {
		return nil, err
	}
	e, pending := x.prefill(ctx)
	if pending {
		go x.prefillTail()
	} else {
		<-x.p.slots // the prefill is over, whatever its outcome
	}
	if e != nil {
		x.finish()
		r.metrics.failure("prefill")
		return nil, peerFault(e)
	}
	go x.stream(ctx)
	return x.st, nil
}

// peerFault keeps the transfer protocol's complaints about a peer from
// reaching the client as the client's own mistake. Inside the transfer
// protocol a frame out of order or out of range, an unknown transfer and
// a reused ID are bad input from the other peer (BadInput), but the
// client sent none of it: to the client they are a failure between the
// servers, a 502 like a lost peer, with the peer's message kept for the
// operator's logs.
func peerFault(e *errkind.Error) *errkind.Error {
	if e == nil || e.Kind != errkind.BadInput {
		return e
	}
	switch e.Code {
	case transfer.CodeProtocol, transfer.CodeUnknownID, transfer.CodeReplayed, transfer.CodeSender:
		c := *e
		c.Kind, c.Param = errkind.Unavailable, ""
		return &c
	}
	return e
}

// takeSlot waits for a prefill slot on p; false when ctx ended first.
func takeSlot(ctx context.Context, p *peer) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// reserve picks a pair and reserves on its decode peer. A decode peer
// that is full right now (an Overload refusal) or that could not be
// reached (restarting, say, before health checks mark it down) is asked
// again, on whichever pair is least loaded then, with backoff, until the
// transfer timeout: the disaggregated equivalent of waiting in serve's
// queue, without holding anything while waiting (a lost generate call
// holds nothing either: decode cancels a reservation whose call went
// away, and every try has a fresh transfer ID). So is a decode peer that
// refused the request's length for limits the router had not heard of
// yet: its Info is refreshed at once, and pairing skips it from then on.
// Every other refusal is final.
func (r *Router) reserve(ctx context.Context, req engine.Request) (*exchange, error) {
	deadline := time.Now().Add(r.opts.TransferTimeout)
	wait := 10 * time.Millisecond
	for {
		if r.ctx.Err() != nil {
			return nil, errkind.Wrap(errkind.Overload, "shutting_down", errClosed, "the server is shutting down")
		}
		d, p, err := r.pick(req)
		if err != nil {
			r.metrics.failure("pick")
			return nil, err
		}
		x := &exchange{r: r, d: d, p: p, id: transfer.NewID().String(), req: req, st: engine.NewStream(),
			resv: make(chan *errkind.Error, 1), ready: make(chan struct{}), term: make(chan engine.Result, 1),
			pout: make(chan prefillAnswer, 1), firstSet: make(chan struct{})}
		x.lctx, x.legs = context.WithCancel(r.ctx)
		if !takeSlot(ctx, p) {
			x.finish()
			return nil, cancelled(ctx)
		}
		r.metrics.request(p, d)
		e := x.reserve(ctx)
		if e == nil {
			return x, nil // the slot is given back when the prefill ends
		}
		<-p.slots
		x.finish()
		retry := (e.Kind == errkind.Overload && e.Code != "decode_busy") || e.Code == codeUnreachable
		if limitRefused(e) && r.refreshAfterRefusal(d, req) {
			// Decode refused the length for limits the router had not
			// heard of yet (it restarted with lower ones). Nothing was
			// reserved; pairing now skips it, and another decode that
			// still admits the request may take it.
			retry = true
		}
		if !retry || time.Now().Add(wait).After(deadline) {
			r.metrics.failure("reserve")
			return nil, e
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, cancelled(ctx)
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// finish closes the control connections and uncounts the pair, once.
func (x *exchange) finish() {
	x.closed.Do(func() {
		x.legs()
		release(x.d, x.p)
	})
}

func cancelled(ctx context.Context) *errkind.Error {
	return errkind.Wrap(errkind.Unavailable, "request_cancelled", context.Cause(ctx), "the request was cancelled")
}

// cancelLegs sends acknowledged cancels to the chosen legs at once and
// waits for both.
func (x *exchange) cancelLegs(decode, prefill bool) {
	var wg sync.WaitGroup
	for _, leg := range []struct {
		on bool
		p  *peer
	}{{decode, x.d}, {prefill, x.p}} {
		if leg.on {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x.r.cancel(leg.p, x.id)
			}()
		}
	}
	wg.Wait()
}

// reserve opens the generate stream and waits for `reserved`. An `error`
// event is returned as is: decode reserved nothing, and nothing else
// happens.
func (x *exchange) reserve(ctx context.Context) *errkind.Error {
	x.sender = x.p.identity()
	go x.readDecode()
	t := time.NewTimer(x.r.opts.TransferTimeout)
	defer t.Stop()
	select {
	case e := <-x.resv:
		return e
	case <-ctx.Done():
		// Decode may have reserved already: the cancel frees it.
		x.cancelLegs(true, false)
		return cancelled(ctx)
	case <-t.C:
		x.cancelLegs(true, false)
		return errkind.New(errkind.Overload, "decode_busy", "the decode server did not reserve KV space within %s", x.r.opts.TransferTimeout)
	}
}

// readDecode runs the generate call and turns its events into the
// exchange's channels and stream: reservation outcome first, then tokens
// (pushed to the stream, which only reaches the client if the exchange
// succeeds), then exactly one final result.
func (x *exchange) readDecode() {
	r, d := x.r, x.d
	// The reservation names the prefill chosen for it, so that decode
	// takes its KV from that prefill's connection only: a transfer id is
	// otherwise a bearer key that any prefill who learnt it could use.
	// Without TLS (tests' plain clients) there is no identity to name.
	var sender string
	if !x.sender.IsZero() {
		sender = x.sender.String()
	}
	resp, err := r.post(x.lctx, d, peerapi.PathGenerate, peerapi.GenerateRequest{
		ID: x.id, Tenant: x.req.Tenant, Prompt: x.req.Prompt, MaxTokens: x.req.MaxTokens, Sampling: peerapi.FromParams(x.req.Sampling),
		PrefillIdentity: sender,
	})
	if err != nil {
		if x.lctx.Err() == nil {
			r.failed(d, err.Error())
		}
		x.resv <- unreachable(d, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		x.resv <- peerFailure(d, resp)
		return
	}
	dec := json.NewDecoder(resp.Body)
	reserved := false
	pushed := 0 // tokens handed to the stream
	end := func(e *errkind.Error, res engine.Result) {
		if !reserved {
			x.resv <- e
			return
		}
		if e != nil {
			res = engine.Result{Err: e}
		}
		x.term <- res
	}
	for {
		var ev peerapi.Event
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			end(errkind.Wrap(errkind.Unavailable, "decode_peer_lost", err, "the connection to the decode server was lost before it finished"), engine.Result{})
			return
		}
		switch ev.Type {
		case peerapi.EventReserved:
			if !reserved {
				reserved = true
				x.resv <- nil
			}
		case peerapi.EventReady:
			if reserved {
				x.rdy.Do(func() { close(x.ready) })
			}
		case peerapi.EventTokens:
			if !reserved {
				end(protocolError("tokens before reserved"), engine.Result{})
				return
			}
			if !x.req.Sampling.Logprobs {
				x.st.Push(ev.Tokens...)
				break
			}
			lps, e := x.logprobsOf(ev, pushed == 0)
			if e != nil {
				end(e, engine.Result{})
				return
			}
			pushed += len(ev.Tokens)
			x.st.PushWith(ev.Tokens, lps)
		case peerapi.EventDone:
			if !reserved {
				end(protocolError("done before reserved"), engine.Result{})
				return
			}
			res := engine.Result{Finish: ev.Finish}
			if ev.Usage != nil {
				res.Usage = *ev.Usage
			}
			end(nil, res)
			return
		case peerapi.EventError:
			e := ev.Error.Err()
			if e == nil {
				e = protocolError("an error event without an error")
			}
			end(e, engine.Result{})
			return
		default:
			// Unknown event types are ignored: a newer decode may say more.
		}
	}
}

func protocolError(what string) *errkind.Error {
	return errkind.New(errkind.Unavailable, "peer_protocol_error", "the decode server broke the control protocol: %s", what)
}

// prefill asks the prefill peer to compute and transfer the KV to the
// decode peer, and waits for the transfer's verdict (see verdict). A
// prefill peer that provably did nothing (retryPrefill) is replaced by
// another, under the same reservation. On failure it cancels the decode
// reservation (acknowledged) and returns the first real error. pending is
// true when decode said `ready` before prefill answered: the request goes
// on, and prefill's answer is still to come (prefillTail).
func (x *exchange) prefill(ctx context.Context) (e *errkind.Error, pending bool) {
	tried := map[*peer]bool{}
	x.startPrefill(tried)
	var decodeErr *errkind.Error
	var grace <-chan time.Time
	for {
		select {
		case <-x.ready:
			return nil, true
		case pa := <-x.pout:
			pe := pa.err
			if pe == nil {
				x.settleFirst(pa.first)
				return nil, false
			}
			if x.retryPrefill(ctx, pa, tried) {
				continue // another prefill peer's answer is on its way
			}
			x.settleFirst(nil)
			if e := x.verdict(pe); e != nil {
				x.cancelLegs(true, false)
				return e, false
			}
			x.r.log.Warn("prefill failed after decode verified the KV; decode's verdict stands",
				"id", x.id, "prefill", x.p.addr, "code", pe.Code, "error", pe.Message)
			return nil, false
		case res := <-x.term:
			// Decode ended before prefill answered. Success can race
			// prefill's answer (decode acknowledged, then generated a few
			// tokens fast); a failure is normally echoed by prefill within
			// a round trip.
			x.early = &res
			if res.Err != nil {
				decodeErr = res.Err
				grace = time.After(decodeGrace)
			}
		case <-grace:
			x.settleFirst(nil)
			x.cancelLegs(false, true)
			return decodeErr, false
		case <-ctx.Done():
			x.settleFirst(nil)
			x.cancelLegs(true, true)
			return cancelled(ctx), false
		}
	}
}

// prefillTail waits for the answer of a prefill that decode's `ready`
// overtook, then gives its slot back. A failure there (every ACK lost:
// prefill timed out waiting for one) changes nothing for the client:
// decode verified the KV. The call ends at the latest when the exchange
// finishes and closes its control connections.
func (x *exchange) prefillTail() {
	pa := <-x.pout
	x.settleFirst(pa.first)
	pe := pa.err
	<-x.p.slots
	if pe != nil && x.lctx.Err() == nil {
		x.r.log.Warn("prefill failed after decode verified the KV; decode's verdict stands",
			"id", x.id, "prefill", x.p.addr, "code", pe.Code, "error", pe.Message)
	}
}

func (x *exchange) isReady() bool {
	select {
	case <-x.ready:
		return true
	default:
		return false
	}
}

// verdict decides a transfer that prefill answered with error pe: nil
// means the request succeeds. Decode is the side that verified the KV, so
// its word decides:
//   - decode said `ready` (verified, decoding started): success, whatever
//     prefill says. After every ACK was lost prefill can only time out,
//     and its view of the transfer is "unknown", not "failed";
//   - decode failed the transfer as Integrity: decode's error, the first
//     real one (prefill's is an echo of decode's ABORT, or a bare lost
//     connection);
//   - prefill only lost its KV connection (Unavailable) and decode says
//     something more specific: decode's error;
//   - otherwise prefill's own error (its admission refusing, say).
//
// When pe is a transfer failure (Unavailable or Integrity), decode's word
// is awaited for up to causeWait, since it may trail prefill's answer.
func (x *exchange) verdict(pe *errkind.Error) *errkind.Error {
	if (pe.Kind == errkind.Unavailable || pe.Kind == errkind.Integrity) && x.early == nil && !x.isReady() {
		t := time.NewTimer(causeWait)
		select {
		case <-x.ready:
		case res := <-x.term:
			x.early = &res
		case <-t.C:
		}
		t.Stop()
	}
	if x.isReady() {
		return nil // decode said ready before its final word: term never beats ready
	}
	if x.early == nil || x.early.Err == nil {
		return pe
	}
	if de := x.early.Err; de.Kind == errkind.Integrity || (pe.Kind == errkind.Unavailable && de.Kind != errkind.Unavailable) {
		return de
	}
	return pe
}

// callPrefill runs the prefill call on p (x.p when it started; the
// caller may replace x.p only once this has answered).
func (x *exchange) callPrefill(p *peer) prefillAnswer {
	r := x.r
	x.d.mu.Lock()
	kvAddr := x.d.info.KVAddr
	x.d.mu.Unlock()
	ctx, done := context.WithTimeout(x.lctx, r.opts.TransferTimeout+5*time.Second)
	defer done()
	cctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	trace := x.nameReached(cctx, stop)
	// wrote: some copy of the call was written, to a connection that may
	// have reached a live prefill process; only a call of which none was
	// is provably unreached, whatever error the last copy ended with.
	var wrote atomic.Bool
	trace.WroteRequest = func(httptrace.WroteRequestInfo) { wrote.Store(true) }
	// Replayable: a kept-alive connection the prefill closed (a restart
	// at the same address) before answering gets the call re-sent on a
	// fresh one, which nameReached names to decode like the first.
	resp, err := r.replayable(httptrace.WithClientTrace(cctx, trace), p, peerapi.PathPrefill, peerapi.PrefillRequest{
		ID: x.id, Tenant: x.req.Tenant, Prompt: x.req.Prompt, MaxTokens: x.req.MaxTokens,
		Sampling: peerapi.FromParams(x.req.Sampling), DecodeKVAddr: kvAddr,
	}, x.id)
	if err != nil {
		var un *unnamedError
		if errors.As(context.Cause(cctx), &un) {
			// Nothing was written (nameReached closed the connection
			// first): the prefill server is not at fault, decode refused.
			return prefillAnswer{err: errkind.Wrap(errkind.Unavailable, "transfer_sender_unnamed", un.err,
				"the decode server would not take the KV from the prefill server the call reached")}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return prefillAnswer{err: errkind.Wrap(errkind.Unavailable, "transfer_timeout", err, "the prefill server did not finish the KV transfer in time")}
		}
		if x.lctx.Err() == nil {
			r.failed(p, err.Error())
		}
		return prefillAnswer{err: unreachable(p, err), unreached: neverConnected(err) && !wrote.Load()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return prefillAnswer{err: peerFailure(p, resp)}
	}
	var res peerapi.PrefillResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return prefillAnswer{err: errkind.Wrap(errkind.Unavailable, "peer_protocol_error", err, "the prefill server's answer could not be read")}
	}
	if !res.OK {
		if e := res.Error.Err(); e != nil {
			return prefillAnswer{err: e, sentNothing: res.BytesSent == 0}
		}
		return prefillAnswer{err: errkind.New(errkind.Internal, "prefill_failed", "the prefill server failed without saying why")}
	}
	return prefillAnswer{first: res.FirstLogprobs}
}

// unnamedError is why nameReached stopped a prefill call: decode did not
// take the rename to the key the call's connection presented.
type unnamedError struct{ err error }

func (e *unnamedError) Error() string { return "naming the prefill to decode: " + e.err.Error() }

// nameReached makes the reservation name the prefill the PREFILL call
// actually reaches. The reservation was made with the key the peer
// presented on the router's last answer from it, but the call may go out
// on another connection: a prefill server restarted with a new
// certificate, or an address that several prefill processes answer,
// presents another key there, and decode would refuse the KV of the very
// prefill the router chose (as another prefill's; the prefill hears
// transfer_unknown_id). The hook runs once
// the connection is chosen (after its handshake), before the request is
// written, so a different key is named to decode (expect) first; should
// decode refuse, the connection is closed so that the prompt is never
// sent, and stop says why. x.sender is only touched here while the call
// runs (retryPrefill waits for its answer).
func (x *exchange) nameReached(ctx context.Context, stop context.CancelCauseFunc) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		raw, ok := peerauth.ConnKeyIdentity(info.Conn)
		key := transfer.Identity(raw)
		if !ok || key == x.sender {
			return
		}
		if err := x.r.expect(ctx, x.d, x.id, key); err != nil {
			stop(&unnamedError{err})
			info.Conn.Close()
			return
		}
		x.r.log.Info("the prefill call reached a key other than the one the reservation named; decode now expects it",
			"id", x.id, "prefill", x.p.addr, "was", x.sender.Short(), "now", key.Short())
		x.sender = key
	}}
}

// stream waits for decode's final result (or the client's cancel) and
// closes the client's stream with it. Only decode's `done` gives a finish
// reason.
func (x *exchange) stream(ctx context.Context) {
	defer x.finish()
	var res engine.Result
	if x.early != nil {
		res = *x.early
	} else {
		select {
		case res = <-x.term:
		case <-ctx.Done():
			// Close first so the client side is not held by the cancel
			// round trips; the pair stays counted until they are acknowledged.
			x.st.Close(engine.Result{Err: cancelled(ctx), Usage: engine.Usage{PromptTokens: len(x.req.Prompt)}})
			x.cancelLegs(true, true)
			return
		}
	}
	if res.Err != nil {
		x.r.metrics.failure("decode")
	}
	x.st.Close(res)
}
