package decodesrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// kvConn is one authenticated KV stream from a prefill server.
type kvConn struct {
	id uint64
	// from is who the connection authenticated as (its certificate's
	// key): a reservation that names its prefill takes frames only from a
	// connection that presents that one.
	from transfer.Identity
	c    transfer.Conn
	out  chan *transfer.Frame // a nil frame: close once everything before it is written
	once sync.Once
	done chan struct{}
	// bound are the transfers this connection opened (loop only), so that a
	// frame too corrupted to name its transfer still fails the transfers
	// it could have belonged to with the right reason.
	bound map[transfer.ID]bool
}

func (c *kvConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.c.Close()
	})
}

// send queues f for the writer. Decode only sends small control frames,
// about one per frame received; a peer that lets this queue fill is not
// reading, and is cut off rather than allowed to stall the loop.
func (c *kvConn) send(f *transfer.Frame) {
	select {
	case c.out <- f:
	case <-c.done:
	default:
		c.close()
	}
}

// closeWhenFlushed closes the connection once the frames queued so far
// (the ABORTs that say why) are written. Closing at once would leave
// prefill with a bare "connection lost" instead of the reason.
func (c *kvConn) closeWhenFlushed() { c.send(nil) }

// write sends what the loop queues until the connection closes.
func (s *Server) write(kc *kvConn) {
	for {
		select {
		case f := <-kc.out:
			if f == nil {
				kc.close()
				return
			}
			if err := transfer.Send(kc.c, f, s.cfg.Peers.FrameBytes); err != nil {
				kc.close()
				return
			}
		case <-kc.done:
			return
		}
	}
}

// Bounds of closeKV's waits: for prefill servers to close their KV
// connections themselves, then for decode's own queued frames to be
// written before it cuts what is left.
const (
	kvPeerCloseWait = 2 * time.Second
	kvFlushWait     = time.Second
)

// closeKV ends every KV connection at shutdown, once the listener is
// closed and nothing is left to reserve, without dropping a frame the
// loop queued: first it waits for prefill servers to close them (each
// does once its transfer ended, which an ACK or an ABORT queued here
// tells it), then it closes each once what is queued on it is written,
// and only then cuts what is left (a peer that does not read). Closing
// them all at once, as shutdown did, dropped queued frames: the ACK of a
// transfer that verified during the drain, whose request then decoded and
// ended before the connection's writer ran, never left, and prefill
// failed a request decode had served with "decode connection lost: EOF"
// (TestShutdownDrainsReservations, about one run in forty under -race).
func (s *Server) closeKV() {
	done := make(chan struct{})
	go func() {
		s.kvWG.Wait()
		close(done)
	}()
	ended := func(d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
	if ended(kvPeerCloseWait) {
		return
	}
	s.call(func() {
		s.kvClosing = true
		for _, c := range s.conns {
			c.closeWhenFlushed()
		}
	})
	if ended(kvFlushWait) {
		return
	}
	s.call(func() {
		for _, c := range s.conns {
			c.close()
		}
	})
	<-done
}

// acceptKV accepts KV stream connections until ln closes.
func (s *Server) acceptKV(ctx context.Context, ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("kv listener stopped", "error", err)
			}
			return
		}
		s.kvWG.Add(1)
		go func() {
			defer s.kvWG.Done()
			s.serveKV(ctx, nc)
		}()
	}
}

// serveKV authenticates one connection, then reads its frames into the
// loop until it ends. A writer goroutine sends what the loop queues; the
// connection stays registered until the writer has stopped, so that
// shutdown can still close it.
func (s *Server) serveKV(ctx context.Context, nc net.Conn) {
	err := peerauth.Handshake(ctx, nc)
	if err == nil {
		// Only prefill servers send KV. The listener Run was given should
		// already refuse other roles in the handshake; checking here too
		// keeps that promise whatever listener it was.
		err = s.auth.Authorize(nc, "decode's KV listener", peerauth.RolePrefill)
	}
	if err != nil {
		s.tm.AuthFailures.Inc()
		s.log.Warn("kv connection refused", "remote", nc.RemoteAddr().String(), "error", err)
		nc.Close()
		return
	}
	// Taken once, at the handshake: the identity a connection's frames
	// are judged by cannot change while it lives. A handshake that passed
	// Authorize always carries a certificate; without one the zero
	// identity matches only reservations that name no sender.
	from, _ := peerauth.ConnKeyIdentity(nc)
	var c transfer.Conn = transfer.NewTCPConn(nc, transfer.TCPOptions{MaxFrameBytes: s.cfg.Peers.FrameBytes})
	if s.opts.Faults != (transfer.FaultSpec{}) {
		c = transfer.WithFaults(c, s.opts.Faults)
	}
	kc := &kvConn{id: s.nextPeer.Add(1), from: from, c: c, out: make(chan *transfer.Frame, 1024), done: make(chan struct{}),
		bound: map[transfer.ID]bool{}}
	if !s.post(func() {
		s.conns[kc.id] = kc
		if s.kvClosing {
			kc.closeWhenFlushed()
		}
	}) {
		kc.close()
		return
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		s.write(kc)
	}()
	for {
		f, err := kc.c.Read()
		if err == nil && !fromPrefill(f.Type) {
			// Stop reading at once, as for a corrupted frame: nothing
			// after a frame prefill may not send is taken either.
			s.framesRefused.WithLabelValues(f.Type.String()).Inc()
			err = fmt.Errorf("prefill sent a %v frame", f.Type)
			if !s.post(func() { s.refuseFrame(kc, f.Type) }) {
				kc.close()
			}
		} else if err == nil {
			s.tm.Bytes.Add(float64(f.Size()))
			if !s.post(func() { s.frameIn(kc, f) }) {
				kc.close() // the loop stopped: shutting down
				<-written
				return
			}
			continue
		} else if fe := (*transfer.FrameError)(nil); errors.As(err, &fe) && !errors.Is(err, transfer.ErrTruncated) {
			if !s.post(func() { s.badFrame(kc, fe) }) {
				kc.close()
			}
		} else {
			// A clean end, a reset, or a stream that ended inside a frame:
			// the peer went away, which is not corruption.
			kc.close()
		}
		<-written
		s.post(func() {
			delete(s.conns, kc.id)
			s.step(transfer.PeerLost{Peer: kc.id, Err: err})
		})
		return
	}
}

// fromPrefill reports whether a prefill server may send frames of type t
// on its KV connection: the sender's side of the transfer protocol and
// nothing else. CANCEL is the router's, and reaches decode over the
// router's control requests (handleCancel); taken from a prefill's
// connection it would cancel any transfer whose id that prefill knew,
// another tenant's included, even one bound to another connection. The
// other types are decode's own or the router's, and no prefill sends them.
func fromPrefill(t transfer.Type) bool {
	switch t {
	case transfer.TypeOpen, transfer.TypeData, transfer.TypeCommit, transfer.TypeAbort:
		return true
	}
	return false
}

// refuseFrame handles a frame of a type prefill may not send (loop only):
// the frame never reaches the Table; the transfers this connection opened
// fail as protocol errors, since their sender broke the protocol, each
// with an ABORT; and the connection gets an ABORT under the zero id that
// names the violation, then closes, as for a corrupted frame.
func (s *Server) refuseFrame(kc *kvConn, t transfer.Type) {
	reason := errkind.New(errkind.BadInput, transfer.CodeProtocol,
		"kv transfer: a %v frame arrived on a prefill's KV connection, where only OPEN, DATA, COMMIT and ABORT may; %v is never taken from a prefill, so decode closed the connection", t, t)
	s.log.Warn("kv connection refused a frame prefill may not send", "peer", kc.id, "type", t.String())
	for id := range kc.bound {
		if r := s.table.Receiver(id); r != nil && !r.Terminal() {
			s.step(transfer.Cancel{ID: id, Reason: reason, Local: true}) // bound here: the Receiver sends the ABORT
		}
	}
	kc.send(&transfer.Frame{Type: transfer.TypeAbort, Kind: uint8(reason.Kind), Code: reason.Code, Reason: clip(reason.Message)})
	kc.closeWhenFlushed()
}

// frameIn steps one cleanly decoded frame, noting which reservation an
// OPEN bound to this connection (loop only).
func (s *Server) frameIn(kc *kvConn, f *transfer.Frame) {
	id, reserved := f.ID, false // f is the Table's once stepped
	if f.Type == transfer.TypeOpen {
		r := s.table.Receiver(id)
		reserved = r != nil && r.Unopened()
	}
	s.step(transfer.FrameIn{Peer: kc.id, From: kc.from, Frame: f})
	if reserved {
		if r := s.table.Receiver(id); r == nil || !r.Unopened() {
			kc.bound[id] = true
		}
	}
}

// badFrame handles a frame that failed its CRC32C or would not decode
// (loop only). The stream is out of sync and is closed, but first every
// transfer the frame could belong to fails as an Integrity error and its
// sender is told so with an ABORT on this connection, so prefill and the
// router report "integrity check failed", not "connection lost":
//   - the transfer the header claims, through the Receiver (which checks
//     that it is bound to this connection);
//   - a claimed reservation that no stream has opened yet (the bad frame
//     was its OPEN), when this connection presents the prefill the
//     reservation names. The id is not covered by a verified checksum, but
//     only an authenticated peer can send it, and a corrupted id matches
//     no live 128-bit id; the transfer could not succeed anyway, since
//     its sender's one connection is about to close. From another prefill
//     it is refused like any frame of theirs (counted, logged), so that a
//     deliberately damaged frame is no way around the sender check;
//   - every other transfer this connection opened, since a frame whose
//     header is unreadable names none;
//   - and, with an ABORT under the zero id (which prefill's Sender takes as
//     addressed to every transfer on the connection), any transfer whose
//     OPEN was the frame hit in its id bytes: decode cannot name it, but
//     its sender learns of the corruption instead of a lost connection.
func (s *Server) badFrame(kc *kvConn, fe *transfer.FrameError) {
	reason := errkind.New(errkind.Integrity, transfer.CodeChecksum, "kv transfer: corrupted frame from prefill: %v", fe)
	if fe.HasID {
		if r := s.table.Receiver(fe.ID); r != nil && r.Unopened() && !r.Accepts(kc.from) {
			s.wrongSender(transfer.SenderRefused{ID: fe.ID, Peer: kc.id, Type: transfer.TypeOpen, Presented: kc.from, Expected: r.Sender()})
		} else if r != nil && r.Unopened() {
			s.step(transfer.Cancel{ID: fe.ID, Reason: reason, Local: true})
			kc.send(&transfer.Frame{Type: transfer.TypeAbort, ID: fe.ID, Kind: uint8(reason.Kind), Code: reason.Code, Reason: clip(reason.Message)})
		} else {
			s.step(transfer.BadFrame{Peer: kc.id, Err: fe})
		}
	}
	for id := range kc.bound {
		if r := s.table.Receiver(id); r != nil && !r.Terminal() {
			s.step(transfer.Cancel{ID: id, Reason: reason, Local: true}) // bound here: the Receiver sends the ABORT
		}
	}
	kc.send(&transfer.Frame{Type: transfer.TypeAbort, Kind: uint8(reason.Kind), Code: reason.Code, Reason: clip(reason.Message)})
	kc.closeWhenFlushed()
}

// Bounds on wrongSender's log lines. A prefill that keeps sending frames
// for a transfer reserved for another (an ABORT costs it a few dozen
// bytes and gets no answer, so nothing ever closes its connection) would
// otherwise write one line per frame, as fast as the loop reads them:
// enough to fill the operator's disk or bury every other line. The
// counter still counts every frame; the log says how many lines it left
// out.
const (
	wrongSenderLogBurst = 10
	wrongSenderLogEvery = time.Second
)

// logBudget is how many lines wrongSender has written in the current
// window, and how many it left out since its last line (loop only).
type logBudget struct {
	since      time.Duration
	used       int
	suppressed int
}

// wrongSender counts and logs a frame refused because its connection is
// not the prefill the router chose for the transfer (loop only). It names
// both by key prefix (transfer.Identity.Short): enough to find the
// certificates, nothing secret. At most wrongSenderLogBurst lines a
// wrongSenderLogEvery are written; the next one written says how many
// were not.
func (s *Server) wrongSender(a transfer.SenderRefused) {
	s.sendersRefused.Inc()
	b := &s.senderLog
	if now := s.now(); now-b.since >= wrongSenderLogEvery {
		b.since, b.used = now, 0
	}
	if b.used >= wrongSenderLogBurst {
		b.suppressed++
		return
	}
	b.used++
	s.log.Warn("kv frame refused: the transfer is reserved for another prefill (wrong prefill)", "id", a.ID.String(), "peer", a.Peer,
		"type", a.Type.String(), "expected_prefill", a.Expected.Short(), "presented_prefill", a.Presented.Short(),
		"lines_left_out", b.suppressed)
	b.suppressed = 0
}

func clip(s string) string {
	if len(s) > transfer.MaxString {
		return s[:transfer.MaxString]
	}
	return s
}
