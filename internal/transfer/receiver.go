package transfer

import (
	"fmt"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Reservation is what decode reserved for one transfer, before prefill
// sends anything: pages for Tokens+MaxNew positions, tagged to (Tenant,
// ID), until Deadline.
type Reservation struct {
	ID            ID
	Tenant        string
	Tokens        int // n: the prompt length the router admitted
	MaxNew        int
	Layers, KVDim int
	// Deadline is the lease: on the edge's monotonic clock, the time by
	// which the transfer must have verified, or it fails and the pages are
	// freed.
	Deadline      time.Duration
	Window        int // offered to the sender in HELLO; 0: DefaultWindow
	MaxFrameBytes int // frame limit offered in HELLO; 0: DefaultMaxFrameBytes
	// Sender is the prefill the router chose for this transfer: only a
	// connection that presents it (FrameIn.From) may open the transfer or
	// send it anything. Zero: any prefill connection may (Identity).
	Sender Identity
	// Router is the router that made the reservation (the identity its
	// connection presented, as Identity names prefills): only it may
	// rename the sender (Table.Expect) or cancel the transfer (Cancel);
	// any other router is answered as if the id were unknown. A router
	// back with a new certificate is another router: its old reservations
	// end by their Deadline. Zero: a router without an identity.
	Router Identity
}

type recvState uint8

const (
	rReserved recvState = iota
	rOpen
	rVerifying
	rReady
	rFailed
)

var recvStateNames = [...]string{"reserved", "open", "verifying", "ready", "failed"}

func (s recvState) String() string { return recvStateNames[s] }

type frameKey struct {
	tf, tt, lf, lt int
	crc            uint32
}

// Receiver is the decode side of one transfer: a pure state machine. It
// tracks which (token, layer) cells arrived, from which frame, and asks the
// edge to write, to digest, and finally to mark the sequence Ready or to
// release its pages. A Table owns the Receivers of a decode server.
type Receiver struct {
	res   Reservation
	state recvState
	peer  uint64

	cover   []uint32 // per cell t*Layers+l: 0, or the seq+1 that wrote it
	covered int
	seqs    map[uint32]frameKey
	credit  uint32 // every seq below it has been received
	// credited is the credit last sent; every is how far credit must get
	// past it before the next CREDIT goes out (creditStep). window is the
	// agreed window (agreedWindow): no new frame may be that far past the
	// credit.
	credited, every, window uint32

	writes    map[uint32]bool // WriteKV issued, WriteDone not yet seen
	digesting bool
	commit    *Frame
	// rb is the digest the edge folds in as it applies writes
	// (readback.go). The machine only carries it to the actions.
	rb *readBack

	released bool
	err      *errkind.Error
}

func newReceiver(res Reservation) *Receiver {
	if res.Window <= 0 {
		res.Window = DefaultWindow
	}
	if res.MaxFrameBytes <= 0 {
		res.MaxFrameBytes = DefaultMaxFrameBytes
	}
	return &Receiver{res: res, seqs: map[uint32]frameKey{}, writes: map[uint32]bool{}}
}

// State names the current state, for logs and tests.
func (r *Receiver) State() string { return r.state.String() }

// Unopened reports whether the reservation still waits for its OPEN: no
// stream is bound to it yet.
func (r *Receiver) Unopened() bool { return r.state == rReserved }

// Accepts reports whether a connection that presented from may send
// frames for this transfer: the reservation names no sender, or names
// from. The edge asks before it acts on a frame outside the Table (a
// corrupted one claiming this id).
func (r *Receiver) Accepts(from Identity) bool {
	return r.res.Sender.IsZero() || from == r.res.Sender
}

// Sender is the prefill the reservation names (zero: any).
func (r *Receiver) Sender() Identity { return r.res.Sender }

// Router is the router that made the reservation (Reservation.Router).
func (r *Receiver) Router() Identity { return r.res.Router }

// Ready reports whether the transfer verified.
func (r *Receiver) Ready() bool { return r.state == rReady }

// Terminal reports whether the transfer ended (Ready or failed).
func (r *Receiver) Terminal() bool { return r.state >= rReady }

// Released reports whether Release has been emitted.
func (r *Receiver) Released() bool { return r.released }

// InFlight is the number of writes and digests asked for and not yet
// confirmed: pages must not be freed while it is non-zero.
func (r *Receiver) InFlight() int {
	n := len(r.writes)
	if r.digesting {
		n++
	}
	return n
}

// Err is the failure, once failed.
func (r *Receiver) Err() *errkind.Error { return r.err }

// step applies one event routed to this receiver by its Table.
func (r *Receiver) step(ev Event) []Action {
	var out []Action
	switch e := ev.(type) {
	case Tick:
		if !r.Terminal() && e.Now >= r.res.Deadline {
			out = r.fail(out, errf(errkind.Unavailable, CodeTimeout, "reservation lease expired in state %v (%d of %d cells received)",
				r.state, r.covered, len(r.cover)), true)
		}
		// Frames that arrived since the last CREDIT are credited by the
		// next tick at the latest: on a slow link half a window can take
		// longer than the sender's retry interval, and the sender counts
		// only CREDITs as progress (creditStep).
		if !r.Terminal() && r.state >= rOpen && r.credit != r.credited {
			out = append(out, r.creditFrame())
		}
	case FrameIn:
		if !r.Accepts(e.From) {
			// Before anything else, in every state: a frame from the wrong
			// prefill must neither bind the transfer (OPEN), nor fail it
			// (DATA before OPEN, COMMIT, ABORT), nor learn its verdict.
			return refuseSender(out, r.res.ID, e.Peer, r.res.Sender, e.From, e.Frame)
		}
		out = r.frame(out, e.Peer, e.Frame)
	case BadFrame:
		if r.state >= rOpen && !r.Terminal() && e.Peer == r.peer {
			out = r.fail(out, errf(errkind.Integrity, CodeChecksum, "corrupted frame from prefill: %v", e.Err), true)
		}
	case PeerLost:
		if r.state >= rOpen && !r.Terminal() && e.Peer == r.peer {
			out = r.fail(out, errf(errkind.Unavailable, CodePeerLost, "prefill connection lost: %v", e.Err), false)
		}
	case Cancel:
		if !r.Terminal() {
			out = r.fail(out, cancelReason(e.Reason), r.state >= rOpen)
		}
		out = append(out, CancelDone{ID: r.res.ID, WasReady: r.state == rReady})
	case WriteDone:
		if !r.writes[e.Seq] {
			return out // not ours, or confirmed twice: nothing to drain
		}
		delete(r.writes, e.Seq)
		if e.Err != nil && !r.Terminal() {
			out = r.fail(out, errf(errkind.Internal, CodeWrite, "writing frame %d into the reserved sequence: %v", e.Seq, e.Err), true)
		}
		out = r.settle(out)
	case DigestDone:
		if !r.digesting {
			return out
		}
		r.digesting = false
		switch {
		case r.state != rVerifying:
			// Failed while the digest was being computed: only the drain
			// was waiting for it.
		case e.Err != nil:
			out = r.fail(out, errf(errkind.Internal, CodeWrite, "reading the received KV for the digest: %v", e.Err), true)
		case e.Sum != r.commit.Digest:
			out = r.fail(out, errf(errkind.Integrity, CodeDigest, "digest of the %d received tokens does not match the sender's", r.res.Tokens), true)
		default:
			r.state, r.rb = rReady, nil
			out = append(out, MarkReady{ID: r.res.ID, Tokens: int(r.commit.Tokens), FirstToken: r.commit.FirstToken},
				SendFrame{Peer: r.peer, Frame: &Frame{Type: TypeAck, ID: r.res.ID}})
		}
		out = r.settle(out)
	}
	return out
}

func (r *Receiver) frame(out []Action, peer uint64, f *Frame) []Action {
	if r.Terminal() {
		return r.afterEnd(out, peer, f)
	}
	if r.state >= rOpen && peer != r.peer {
		// Only the connection that opened the stream may feed it; refuse
		// the intruder without disturbing the transfer. An ABORT is never
		// answered, as everywhere (table.go).
		if f.Type == TypeAbort {
			return out
		}
		return append(out, SendFrame{Peer: peer, Frame: abortFrame(f.ID, errf(errkind.BadInput, CodeUnknownID, "transfer is bound to another connection"))})
	}
	switch f.Type {
	case TypeOpen:
		return r.open(out, peer, f)
	case TypeData:
		if (r.state == rOpen || r.state == rVerifying) && r.duplicate(f) {
			// A retransmission (its CREDIT was late or lost, perhaps
			// racing the verdict): ignored, but the credit is repeated,
			// which may be what the sender is missing.
			return append(out, r.creditFrame())
		}
		if r.state != rOpen {
			return r.protocol(out, peer, "DATA in state %v", r.state)
		}
		return r.data(out, f)
	case TypeCommit:
		if r.state == rReserved {
			return r.protocol(out, peer, "COMMIT before OPEN")
		}
		if r.commit != nil {
			c := r.commit
			if c.Tokens != f.Tokens || c.Frames != f.Frames || c.FirstToken != f.FirstToken || c.Digest != f.Digest {
				return r.fail(out, errf(errkind.BadInput, CodeProtocol, "second COMMIT differs from the first"), true)
			}
			return out // retransmission; the verdict follows when it is known
		}
		if err := r.checkCount(int(f.Tokens)); err != nil {
			return r.fail(out, err, true)
		}
		r.commit = f
		return r.settle(out)
	case TypeAbort:
		return r.fail(out, fromFrame(f, "prefill"), false)
	}
	return r.protocol(out, peer, "unexpected %v", f.Type)
}

// afterEnd answers frames for a finished transfer so that a sender whose
// ACK or ABORT was lost learns the verdict from its retransmission.
func (r *Receiver) afterEnd(out []Action, peer uint64, f *Frame) []Action {
	if r.peer != 0 && peer != r.peer || f.Type == TypeAbort {
		return out
	}
	if r.state == rReady {
		if f.Type == TypeCommit {
			return append(out, SendFrame{Peer: peer, Frame: &Frame{Type: TypeAck, ID: r.res.ID}})
		}
		return out
	}
	return append(out, SendFrame{Peer: peer, Frame: abortFrame(r.res.ID, r.err)})
}

func (r *Receiver) open(out []Action, peer uint64, f *Frame) []Action {
	hello := SendFrame{Peer: peer, Frame: &Frame{Type: TypeHello, ID: r.res.ID, Window: uint32(r.res.Window), MaxFrameBytes: uint32(r.res.MaxFrameBytes)}}
	if r.state != rReserved {
		return append(out, hello) // a retransmitted OPEN
	}
	r.peer, r.state = peer, rOpen
	if f.Tenant != r.res.Tenant {
		return r.fail(out, errf(errkind.Integrity, CodeTenant, "stream opened for a different tenant than the reservation"), true)
	}
	if err := r.checkCount(int(f.Tokens)); err != nil {
		return r.fail(out, err, true)
	}
	if int(f.Layers) != r.res.Layers || int(f.KVDim) != r.res.KVDim {
		return r.fail(out, errf(errkind.BadInput, CodeProtocol, "sender layout %d layers x %d kvdim, decode has %d x %d",
			f.Layers, f.KVDim, r.res.Layers, r.res.KVDim), true)
	}
	r.window = agreedWindow(r.res.Window, int(f.Window))
	r.every = creditStep(r.res.Window, int(f.Window))
	r.cover = make([]uint32, r.res.Tokens*r.res.Layers)
	r.rb = newReadBack(r.res.Tokens, r.res.Layers, r.res.KVDim)
	return append(out, hello)
}

// checkCount is the count check: a transfer carries exactly the number of
// tokens decode reserved for, never fewer (a placeholder) or more.
func (r *Receiver) checkCount(n int) *errkind.Error {
	if n != r.res.Tokens {
		return errf(errkind.Integrity, CodeCount, "transfer carries %d tokens, the reservation is for %d", n, r.res.Tokens)
	}
	return nil
}

func (r *Receiver) data(out []Action, f *Frame) []Action {
	tf, tt, lf, lt := int(f.TokFrom), int(f.TokTo), int(f.LayerFrom), int(f.LayerTo)
	// Empty or reversed ranges: Decode refuses them, but this machine
	// keeps its own invariants (both reversed would count a cell that
	// covers nothing).
	if tf >= tt || lf >= lt || tt > r.res.Tokens || lt > r.res.Layers {
		return r.fail(out, errf(errkind.BadInput, CodeProtocol, "frame %d covers tokens [%d, %d) x layers [%d, %d), reservation is %d x %d",
			f.Seq, tf, tt, lf, lt, r.res.Tokens, r.res.Layers), true)
	}
	cells := (tt - tf) * (lt - lf)
	if want := cells * 8 * r.res.KVDim; len(f.Payload) != want {
		return r.fail(out, errf(errkind.Integrity, CodeCoverage, "frame %d payload is %d bytes, its ranges need %d", f.Seq, len(f.Payload), want), true)
	}
	if int(f.Seq) >= len(r.cover) || (r.commit != nil && f.Seq >= r.commit.Frames) {
		return r.fail(out, errf(errkind.BadInput, CodeProtocol, "frame seq %d out of range", f.Seq), true)
	}
	// Flow control is enforced, not only offered: a sender sends below
	// its credit plus the window, and its credit is one this receiver
	// sent, so a new frame that far past the credit comes from a sender
	// that ignores the window (retransmissions are below it, and
	// duplicates never get here).
	if uint64(f.Seq) >= uint64(r.credit)+uint64(r.window) {
		return r.fail(out, errf(errkind.BadInput, CodeProtocol, "frame seq %d outside the window (credit %d, window %d)", f.Seq, r.credit, r.window), true)
	}
	if _, ok := r.seqs[f.Seq]; ok { // and not a duplicate (frame)
		return r.fail(out, errf(errkind.Integrity, CodeCoverage, "two different frames with seq %d", f.Seq), true)
	}
	key := keyOf(f)
	L := r.res.Layers
	for t := tf; t < tt; t++ {
		for l := lf; l < lt; l++ {
			if prev := r.cover[t*L+l]; prev != 0 {
				return r.fail(out, errf(errkind.Integrity, CodeCoverage, "token %d layer %d sent twice (frames %d and %d)", t, l, prev-1, f.Seq), true)
			}
		}
	}
	for t := tf; t < tt; t++ {
		for l := lf; l < lt; l++ {
			r.cover[t*L+l] = f.Seq + 1
		}
	}
	r.covered += cells
	r.seqs[f.Seq] = key
	r.writes[f.Seq] = true
	data := payloadFloats(f.Payload)
	// The action carries the frame's pooled buffer, if any, for Apply to
	// give back once the KV is copied (bufpool.go).
	out = append(out, WriteKV{ID: r.res.ID, Seq: f.Seq, TokFrom: tf, TokTo: tt, LayerFrom: lf, LayerTo: lt, Data: data, buf: f.buf, rb: r.rb})
	old := r.credit
	for _, ok := r.seqs[r.credit]; ok; _, ok = r.seqs[r.credit] {
		r.credit++
	}
	if r.credit != old && r.credit-r.credited >= r.every {
		out = append(out, r.creditFrame())
	}
	return r.settle(out)
}

// creditStep is how many frames the receiver lets arrive between
// CREDITs: half the window both sides agreed on (the smaller of the
// reservation's and the sender's, from OPEN), at least 1. A CREDIT is a
// frame, a write and, on loopback, the whole receive path run in the
// writer's system call: one per DATA frame cost a tenth of a transfer's
// time. Half the window is as far as it goes without stalling the
// sender: a sender with its whole window in flight has sent credit +
// window frames, and once they arrive the receiver's credit is at least
// step past the last one it sent, so the next CREDIT is already on its
// way (docs/transfer-protocol.md). And every Tick credits whatever
// arrived since the last CREDIT, so on a link slow enough that half a
// window takes longer than the sender's retry interval, the sender still
// hears of progress once per tick: the edge must tick well inside the
// sender's retry interval (decodesrv: every 50 ms, against 500 ms).
func creditStep(reserved, sender int) uint32 {
	return max(1, agreedWindow(reserved, sender)/2)
}

// agreedWindow is the window both sides use: the smaller of the
// reservation's (offered in HELLO) and the sender's (in OPEN; 0: none
// given). The Sender adopts the same minimum when HELLO arrives.
func agreedWindow(reserved, sender int) uint32 {
	w := reserved
	if sender > 0 && sender < w {
		w = sender
	}
	return uint32(w)
}

// duplicate reports whether f is byte for byte the DATA frame already
// received under its seq (keyOf).
func (r *Receiver) duplicate(f *Frame) bool {
	old, ok := r.seqs[f.Seq]
	return ok && old == keyOf(f)
}

// keyOf is the key a DATA frame is recorded under: its ranges and its
// CRC, verified when it was decoded, which identifies its bytes as well
// as a checksum of the payload would without reading the payload again.
func keyOf(f *Frame) frameKey {
	return frameKey{int(f.TokFrom), int(f.TokTo), int(f.LayerFrom), int(f.LayerTo), f.dataCRC()}
}

func (r *Receiver) creditFrame() SendFrame {
	r.credited = r.credit
	return SendFrame{Peer: r.peer, Frame: &Frame{Type: TypeCredit, ID: r.res.ID, Credit: r.credit}}
}

// settle moves on once pending work allows: to verification when the
// commit is in and every frame landed, or to Release when a failed
// transfer has drained.
func (r *Receiver) settle(out []Action) []Action {
	if r.state == rFailed {
		if !r.released && r.InFlight() == 0 {
			r.released = true
			out = append(out, Release{ID: r.res.ID})
		}
		return out
	}
	if r.state != rOpen || r.commit == nil || uint32(len(r.seqs)) < r.commit.Frames {
		return out
	}
	// Every frame the commit announced has arrived: coverage must now be
	// exactly the committed tokens x every layer, nothing missing.
	n := int(r.commit.Tokens) * r.res.Layers
	if r.covered != n || len(r.cover) < n {
		return r.fail(out, errf(errkind.Integrity, CodeCoverage, "%d frames covered %d of %d (token, layer) cells", r.commit.Frames, r.covered, n), true)
	}
	for _, c := range r.cover[:n] {
		if c == 0 {
			return r.fail(out, errf(errkind.Integrity, CodeCoverage, "committed transfer is missing KV cells"), true)
		}
	}
	if len(r.writes) > 0 {
		return out // verify what was written, not what is being written
	}
	r.state, r.digesting = rVerifying, true
	return append(out, ComputeDigest{ID: r.res.ID, Tokens: int(r.commit.Tokens), rb: r.rb})
}

func (r *Receiver) protocol(out []Action, peer uint64, format string, args ...any) []Action {
	if r.peer == 0 {
		r.peer = peer // tell whoever misbehaved; the transfer is over either way
	}
	return r.fail(out, errf(errkind.BadInput, CodeProtocol, format, args...), true)
}

// fail ends the transfer in error. The ABORT goes to the bound peer; the
// pages are released only once every write and digest asked for has been
// confirmed (settle), so no late write can land in a freed page.
func (r *Receiver) fail(out []Action, err *errkind.Error, abort bool) []Action {
	r.state, r.err, r.rb = rFailed, err, nil
	out = append(out, Fail{ID: r.res.ID, Err: err})
	if abort && r.peer != 0 {
		out = append(out, SendFrame{Peer: r.peer, Frame: abortFrame(r.res.ID, err)})
	}
	return r.settle(out)
}

// String summarises the receiver for logs.
func (r *Receiver) String() string {
	return fmt.Sprintf("receiver %v: %v, %d/%d cells, %d in flight", r.res.ID, r.state, r.covered, len(r.cover), r.InFlight())
}
