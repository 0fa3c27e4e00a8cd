package prefillsrv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/server"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// abortWait is how long a failed write to decode waits for decode's
// ABORT to arrive on the reading side (see send).
const abortWait = 250 * time.Millisecond

var errCancelled = errkind.New(errkind.Unavailable, transfer.CodeCancelled, "the router cancelled the request")

// handlePrefill admits, prefills and transfers. The answer is always a
// PrefillResult: status 200 once the request was understood (OK, or Error
// with the original failure), 400 with Error for a body that is not one.
func (s *Server) handlePrefill(w http.ResponseWriter, r *http.Request) {
	var req peerapi.PrefillRequest
	if err := readJSON(w, r, s.body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, peerapi.PrefillResult{Error: peerapi.FromError(err)})
		return
	}
	res := s.prefill(r.Context(), req)
	writeJSON(w, http.StatusOK, res)
}

func fail(err error, sent int64) peerapi.PrefillResult {
	return peerapi.PrefillResult{Error: peerapi.FromError(err), BytesSent: sent}
}

func (s *Server) prefill(ctx context.Context, req peerapi.PrefillRequest) peerapi.PrefillResult {
	id, a, err := s.admit(req)
	if err != nil {
		return fail(err, 0) // nothing computed, nothing sent
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if _, dup := s.active[id]; dup {
		s.mu.Unlock()
		return fail(errkind.Wrap(errkind.BadInput, transfer.CodeReplayed, transfer.ErrReplayed, "kv transfer: this transfer id is already being prefilled"), 0)
	}
	s.active[id] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
	}()

	// The KV connection is opened while the prompt is computed, not after:
	// connecting and authenticating (1.5 ms of mutual TLS on loopback here)
	// would otherwise sit between the last layer and the first frame.
	// Nothing is sent on it before the transfer starts, so a request that
	// fails before then has only opened and closed a connection.
	kv := s.dialEarly(ctx, req.DecodeKVAddr)
	defer kv.discard()

	st, err := s.Engine.Prefill(ctx, a)
	if err != nil {
		return fail(err, 0)
	}
	res := await(ctx, st)
	if res == nil {
		return fail(errCancelled, 0)
	}
	if res.Err != nil {
		return fail(res.Err, 0)
	}
	h := res.Handoff
	if h == nil || h.Tokens != len(req.Prompt) {
		if h != nil {
			h.Lease.Release()
		}
		return fail(errkind.New(errkind.Internal, "internal_error", "prefill produced no KV handoff for the whole prompt"), 0)
	}
	return s.send(ctx, id, req, h, kv)
}

// earlyDial is a KV connection being opened while the prompt is
// computed. take hands it over; discard closes it if nobody took it.
type earlyDial struct {
	done  chan struct{}
	c     net.Conn
	err   error
	taken bool
}

// dialEarly starts opening an authenticated KV connection to addr; ctx
// (the request's) bounds it, and at most 10 s.
func (s *Server) dialEarly(ctx context.Context, addr string) *earlyDial {
	d := &earlyDial{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		d.c, d.err = s.auth.Dial(dctx, addr, peerauth.RoleDecode)
	}()
	return d
}

// take waits for the dial and hands its connection to the caller, who
// closes it.
func (d *earlyDial) take() (net.Conn, error) {
	<-d.done
	d.taken = true
	return d.c, d.err
}

// discard closes the connection unless take handed it over, once the
// dial has ended (without waiting for it).
func (d *earlyDial) discard() {
	if d.taken {
		return
	}
	go func() {
		<-d.done
		if d.c != nil {
			d.c.Close()
		}
	}()
}

// await waits for a prefill stream's result. If ctx ends first the engine
// cancels the request, but it may have finished just before: the stream
// is drained anyway, and a handoff that nobody will send is released, so
// a hang-up can never strand a lease. nil means cancelled.
func await(ctx context.Context, st *engine.Stream) *engine.Result {
	for {
		_, res, err := st.Next(ctx)
		if err == nil && res != nil {
			return res
		}
		if err != nil {
			for {
				_, res, _ := st.Next(context.Background())
				if res != nil {
					if res.Handoff != nil {
						res.Handoff.Lease.Release()
					}
					return nil
				}
			}
		}
	}
}

// admit checks a prefill request against this server's own limits before
// anything is computed or sent.
func (s *Server) admit(req peerapi.PrefillRequest) (transfer.ID, engine.Admitted, error) {
	if req.DecodeKVAddr == "" {
		return transfer.ID{}, engine.Admitted{}, errkind.New(errkind.BadInput, "invalid_request", "decode_kv_addr is empty")
	}
	return server.AdmitPeer(req.ID, req.Tenant, req.Prompt, req.MaxTokens, req.Sampling, s.Model.Config.Vocab, s.limits)
}

// countConn counts the bytes written to the socket.
type countConn struct {
	transfer.Conn
	n atomic.Int64
	// total is the server's bytes-sent counter, added to as each write
	// succeeds: bytes are on the wire before decode can verify them and
	// the client hear back, so the metric never trails the response.
	total prometheus.Counter
}

func (c *countConn) Write(b []byte) error {
	err := c.Conn.Write(b)
	if err == nil {
		c.add(len(b))
	}
	return err
}

func (c *countConn) add(n int) {
	c.n.Add(int64(n))
	c.total.Add(float64(n))
}

// WriteFrame keeps the transport's own frame writer (one writev of header
// and payload, no encode copy) visible through the counter: transfer.Send
// uses it when the connection has one.
func (c *countConn) WriteFrame(f *transfer.Frame, maxBytes int) error {
	fw, ok := c.Conn.(interface {
		WriteFrame(*transfer.Frame, int) error
	})
	if !ok {
		b, err := f.Encode(nil, maxBytes)
		if err != nil {
			return err
		}
		return c.Write(b)
	}
	n := f.Size()
	err := fw.WriteFrame(f, maxBytes)
	if err == nil {
		c.add(n)
	}
	return err
}

// send runs one transfer of h's KV to decode under a Sender, and answers
// once it is terminal. The lease is released exactly when the Sender says
// (on ACK, or on failure). DATA frames alias the leased pages (the
// transfer package's alias.go): this loop carries out the Sender's
// actions in order, on this goroutine, and transfer.Send has written a
// frame when it returns, so every frame is sent before the Release that
// ends the lease.
func (s *Server) send(ctx context.Context, id transfer.ID, req peerapi.PrefillRequest, h *engine.Handoff, kv *earlyDial) peerapi.PrefillResult {
	released := false
	release := func() {
		if !released {
			released = true
			h.Lease.Release()
		}
	}
	defer release() // only matters on the early returns below

	timeout := time.Duration(s.cfg.Peers.TransferTimeout) * time.Second
	if timeout <= 0 {
		timeout = transfer.DefaultLease
	}
	snd, err := transfer.NewSender(transfer.SenderConfig{
		ID: id, Tenant: req.Tenant, Tokens: h.Tokens, MaxTokens: s.limits.MaxInputTokens,
		Layers: s.Model.Config.Layers, KVDim: s.Pool.Config().RowWords(), FirstToken: int32(h.FirstToken),
		Source: h.Lease, MaxFrameBytes: s.cfg.Peers.FrameBytes, Window: s.cfg.Peers.Window,
		Lease: timeout, Retry: s.opts.Retry,
	})
	if err != nil {
		return fail(err, 0)
	}
	nc, err := kv.take()
	if err != nil {
		if ctx.Err() != nil {
			return fail(errCancelled, 0)
		}
		s.tm.Failed.WithLabelValues("decode_unreachable").Inc()
		return fail(errkind.Wrap(errkind.Unavailable, "decode_unreachable", err, "could not open an authenticated KV connection to the decode server"), 0)
	}
	cc := &countConn{Conn: transfer.NewTCPConn(nc, transfer.TCPOptions{MaxFrameBytes: s.cfg.Peers.FrameBytes}), total: s.tm.Bytes}
	var c transfer.Conn = cc
	if s.opts.Faults != (transfer.FaultSpec{}) {
		c = transfer.WithFaults(cc, s.opts.Faults)
	}
	done := make(chan struct{})
	defer func() {
		close(done)
		c.Close()
	}()
	events := make(chan transfer.Event, 64)
	go func() {
		for {
			f, err := c.Read()
			var ev transfer.Event = transfer.FrameIn{Frame: f}
			if err != nil {
				ev = transfer.PeerLost{Err: err}
				if errors.As(err, new(*transfer.FrameError)) {
					ev = transfer.BadFrame{Err: err}
				}
			}
			select {
			case events <- ev:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	s.sending.Add(1)
	defer s.sending.Add(-1)
	s.tm.Started.Inc()
	start := time.Now()
	var ok bool
	var ferr *errkind.Error
	// A failed write is not reported at once: decode closes the connection
	// right after an ABORT that says why (a corrupted frame), and a write
	// racing that close fails first. The reader gets abortWait to deliver
	// the ABORT before the failed write becomes a bare PeerLost.
	var writeErr error
	var writeLost <-chan time.Time
	do := func(acts []transfer.Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case transfer.SendFrame:
				if writeErr != nil {
					continue // the connection is broken; the verdict is on its way
				}
				// Once the router has hung up, only the ABORT that says so
				// goes out. A COMMIT written after the hang-up would start a
				// decode that nobody waits for, and a frame's write is not
				// interrupted, so the check is made before each one.
				if ctx.Err() != nil && a.Frame.Type != transfer.TypeAbort {
					continue
				}
				if err := transfer.Send(c, a.Frame, s.cfg.Peers.FrameBytes); err != nil {
					writeErr, writeLost = err, time.After(abortWait)
				}
			case transfer.Done:
				ok = true
				s.tm.Completed.Inc()
			case transfer.Fail:
				ferr = a.Err
				s.tm.Failed.WithLabelValues(a.Err.Code).Inc()
				s.log.Info("kv transfer failed", "id", id.String(), "code", a.Err.Code, "error", a.Err.Message)
			case transfer.Release:
				release()
			}
		}
	}
	// The checksum counters move as the frames are built, before they are
	// written, not once the transfer has ended: decode starts generating
	// on COMMIT, so a client can have its completion, and read these
	// metrics, before this loop has seen decode's acknowledgement.
	var keptN, readN int
	keptC, readC := s.tm.Checksums.WithLabelValues("kept"), s.tm.Checksums.WithLabelValues("read")
	step := func(ev transfer.Event) {
		acts := snd.Step(ev)
		if kept, read := snd.ChecksumSources(); kept != keptN || read != readN {
			keptC.Add(float64(kept - keptN))
			readC.Add(float64(read - readN))
			keptN, readN = kept, read
		}
		do(acts)
	}
	tick := time.NewTicker(s.opts.TickEvery)
	defer tick.Stop()
	cancelled := ctx.Done()
	step(transfer.Start{Now: 0})
	for !snd.Terminal() || !snd.Released() {
		select {
		case ev := <-events:
			if _, lost := ev.(transfer.PeerLost); lost && writeErr != nil {
				ev = transfer.PeerLost{Err: writeErr} // the first thing that went wrong
			}
			step(ev)
		case <-writeLost:
			writeLost = nil
			step(transfer.PeerLost{Err: writeErr})
		case <-tick.C:
			step(transfer.Tick{Now: time.Since(start)})
		case <-cancelled:
			cancelled = nil // once: the Sender ends now, with an ABORT frame
			step(transfer.Cancel{ID: id, Reason: errCancelled})
		}
	}
	sent := cc.n.Load()
	if ok {
		return peerapi.PrefillResult{OK: true, FirstToken: h.FirstToken, BytesSent: sent, FirstLogprobs: peerapi.FromLogprobs(h.FirstLogprobs)}
	}
	if ferr == nil {
		ferr = errkind.New(errkind.Internal, "internal_error", "kv transfer ended without a verdict")
	}
	return fail(ferr, sent)
}
