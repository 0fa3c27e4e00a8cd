package router

import (
	"context"
	"errors"
	"net"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// prefillAnswer is a prefill call's outcome, with what the router can
// prove about the work it did.
type prefillAnswer struct {
	err *errkind.Error // nil: transferred and acknowledged
	// unreached: the call never connected (the dial failed), so the
	// prefill server never saw the request.
	unreached bool
	// sentNothing: the prefill server answered that it sent no KV byte.
	sentNothing bool
	// first is the first token's log probabilities, when the request
	// asked for them and the prefill succeeded.
	first *peerapi.Logprobs
}

// neverConnected reports whether err is a failure to open the connection
// (refused, unroutable, timed out while connecting). Nothing was written
// on that connection: the HTTP client hands a POST to a new connection
// only after a dial succeeds. But a PREFILL is replayable (the router's
// replayable): a copy written on a kept-alive connection that then failed
// is re-sent on a new one, whose dial may be what failed; callPrefill
// therefore also asks that no copy was written at all. Any later failure
// (reset, EOF mid-answer) may come after the prefill server started,
// even after it sent KV, so it is not this.
func neverConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// startPrefill starts the prefill call on x.p, which counts as tried.
func (x *exchange) startPrefill(tried map[*peer]bool) {
	p := x.p
	tried[p] = true
	go func() { x.pout <- x.callPrefill(p) }()
}

// retryPrefill moves the prefill leg to another healthy prefill peer, under
// the same transfer id and the same decode reservation, when the failed
// call provably did nothing there:
//   - it never connected (a prefill server restarting or gone, before
//     health checks mark it down), or
//   - the peer refused the prompt's length at its own admission, before
//     computing or sending anything (sentNothing), for limits the router
//     had not heard of yet (refreshAfterRefusal), or
//   - the peer failed with model_file_modified having sent nothing: its
//     model file was written under it, and it fails everything until it
//     stops, within seconds. It counts as a failure towards marking the
//     peer down.
//
// In both cases no KV byte reached decode, whose reservation is still
// unopened and takes the new peer's OPEN as the first; no token was
// generated. Any other failure is never retried here: once a prefill
// server may have started sending, a second one could race it into the
// same reservation. It reports whether a new call was started; false
// leaves the exchange as it was.
func (x *exchange) retryPrefill(ctx context.Context, pa prefillAnswer, tried map[*peer]bool) bool {
	if x.early != nil || x.isReady() || ctx.Err() != nil || x.lctx.Err() != nil {
		return false // decode has spoken, or the request is over
	}
	modelGone := pa.sentNothing && pa.err != nil && pa.err.Code == engine.CodeModelFileModified
	if modelGone {
		x.r.failed(x.p, pa.err.Error())
	}
	if !pa.unreached && !modelGone && !(pa.sentNothing && limitRefused(pa.err) && x.r.refreshAfterRefusal(x.p, x.req)) {
		return false
	}
	r := x.r
	r.mu.Lock()
	np, _ := r.leastLoaded(r.prefill, "", x.req, tried)
	if np != nil {
		r.sticky[x.req.Tenant] = np.addr
		np.addInflight(1)
	}
	r.mu.Unlock()
	if np == nil {
		return false
	}
	// A slot on the new peer, as for any prefill; decode's reservation
	// lease runs meanwhile, so decode ending it stops the wait.
	select {
	case np.slots <- struct{}{}:
	case res := <-x.term:
		x.early = &res
		np.addInflight(-1)
		return false
	case <-ctx.Done():
		np.addInflight(-1)
		return false
	}
	// Decode's reservation names the prefill it takes the KV from: name
	// the new one first. Decode refuses once a prefill opened the
	// transfer, which the old one provably never did; if it refuses
	// anyway, the old answer stands.
	if key := np.identity(); key != x.sender {
		if err := r.expect(ctx, x.d, x.id, key); err != nil {
			<-np.slots
			np.addInflight(-1)
			r.log.Warn("could not move the prefill leg to another prefill: decode kept the reservation for the first",
				"id", x.id, "from", x.p.addr, "to", np.addr, "error", err)
			return false
		}
		x.sender = key
	}
	old := x.p
	<-old.slots
	old.addInflight(-1)
	x.p = np
	r.metrics.request(np, x.d)
	r.log.Warn("prefill peer did nothing for the request; its prefill runs on another under the same reservation",
		"id", x.id, "from", old.addr, "to", np.addr, "code", pa.err.Code, "error", pa.err.Error())
	x.startPrefill(tried)
	return true
}
