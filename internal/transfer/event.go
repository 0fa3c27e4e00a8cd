package transfer

import (
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Event is an input to a state machine's Step. Time only ever enters as
// the Now of Start and Tick: a monotonic reading the edge chooses (for
// example time.Since(processStart)); the machines never read a clock.
type Event interface{ isEvent() }

// Start begins a Sender: it sends OPEN (or fails at once, sending nothing,
// if the transfer is over the sender's limit) and starts the lease.
type Start struct{ Now time.Duration }

// Tick advances time: leases expire and retransmissions are due.
type Tick struct{ Now time.Duration }

// FrameIn is a frame that decoded cleanly, received from connection Peer
// (an edge-assigned number; a Sender ignores it). From is who that
// connection authenticated as (its Identity; zero when the edge cannot
// tell): a reservation that names its sender takes frames only from
// connections that present that identity.
//
// Router says the edge authenticated the connection as the router's. Only
// the router may CANCEL a transfer by frame; on any other connection a
// CANCEL is refused, since a prefill that learnt another transfer's id
// could otherwise end it. The zero value is the safe one: not the router.
// decodesrv never sets it: the router's cancels reach it as authenticated
// control requests, stepped as Cancel events, and its KV connections come
// only from prefill servers. The simulation, whose router does send
// CANCEL frames, does.
type FrameIn struct {
	Peer   uint64
	From   Identity
	Router bool
	Frame  *Frame
}

// BadFrame is bytes from Peer that failed to decode (Err is usually a
// *FrameError). A Receiver fails the transfer whose id the header claims;
// a Sender fails its transfer. The edge should also drop the connection,
// since a stream that carried one bad frame cannot be trusted to be in
// sync.
type BadFrame struct {
	Peer uint64
	Err  error
}

// PeerLost is a connection that closed or failed. Every unfinished
// transfer bound to it fails as Unavailable.
type PeerLost struct {
	Peer uint64
	Err  error
}

// Cancel is an explicit cancel (the router's CANCEL, or the client going
// away). It is acknowledged with CancelDone.
//
// On a Table, a router's cancel acts only on the reservations that router
// made: Router must be the identity of the router that asked
// (Reservation.Router; what its connection presented), and a reservation
// made by another router is left as it is and acknowledged like an id
// held for nothing. Local marks decode's own cancels (shutting down, a
// KV connection that broke the protocol, the generate request that made
// the reservation ending), which act on any reservation. The zero value
// is the safe one: a router with no identity, which owns only the
// reservations made without one. A Sender ignores both fields.
type Cancel struct {
	ID     ID
	Reason *errkind.Error // nil: a plain "transfer cancelled"
	Router Identity
	Local  bool
}

// WriteDone confirms a WriteKV action: the edge copied (or failed to copy)
// the frame's KV into the sequence. Until every WriteKV is confirmed, the
// Receiver will neither verify nor release its pages.
type WriteDone struct {
	ID  ID
	Seq uint32
	Err error
}

// DigestDone answers ComputeDigest with the digest of the KV as written
// into the reserved sequence (see Digest).
type DigestDone struct {
	ID  ID
	Sum [32]byte
	Err error
}

func (Start) isEvent()      {}
func (Tick) isEvent()       {}
func (FrameIn) isEvent()    {}
func (BadFrame) isEvent()   {}
func (PeerLost) isEvent()   {}
func (Cancel) isEvent()     {}
func (WriteDone) isEvent()  {}
func (DigestDone) isEvent() {}

// Action is an output of Step for the edge to carry out, in order.
type Action interface{ isAction() }

// SendFrame asks the edge to send Frame to connection Peer (a Sender's
// actions always say 0: it has one peer).
type SendFrame struct {
	Peer  uint64
	Frame *Frame
}

// WriteKV asks the edge to copy KV into the reserved sequence and answer
// with WriteDone{ID, Seq}. Data is laid out as a DATA payload: for each
// layer in [LayerFrom, LayerTo), K of tokens [TokFrom, TokTo) ([token]
// [kvdim]) then V likewise. Apply does exactly that against a kv.Seq;
// ApplyReadBack also reads the cells back into the transfer's digest.
//
// Data may alias the received frame's pooled buffer: Apply gives that
// buffer back, so Data must not be read after Apply (bufpool.go).
type WriteKV struct {
	ID                 ID
	Seq                uint32
	TokFrom, TokTo     int
	LayerFrom, LayerTo int
	Data               []float32

	buf bufRef    // the pooled buffer Data lives in, if any
	rb  *readBack // the transfer's folded digest (readback.go)
}

// ComputeDigest asks the edge to compute Digest over tokens [0, Tokens) of
// the reserved sequence and answer with DigestDone. All writes have been
// confirmed when it is asked for. Sum computes it, from what
// WriteKV.ApplyReadBack read back when the edge applied every write with
// it (readback.go), else by reading the pages.
type ComputeDigest struct {
	ID     ID
	Tokens int

	rb *readBack
}

// MarkReady says the transfer verified: the sequence holds exactly the
// sender's KV for Tokens tokens, and may be scheduled to decode starting
// from FirstToken. From here the engine owns the pages.
type MarkReady struct {
	ID         ID
	Tokens     int
	FirstToken int32
}

// Done says a Sender's transfer was acknowledged by decode.
type Done struct{ ID ID }

// Release says the transfer's pages may now be freed (scrubbed and
// returned): on the sender, the lease on the prefill KV; on the receiver,
// the reserved sequence. It is emitted at most once per transfer, and
// never while a write or digest the machine asked for is outstanding.
type Release struct{ ID ID }

// Fail says the transfer ended in error. It is emitted at most once per
// transfer, and never after MarkReady or Done.
type Fail struct {
	ID  ID
	Err *errkind.Error
}

// CancelDone acknowledges a Cancel event. WasReady is true when the
// transfer had already verified: the cancel is then the engine's to carry
// out, since it owns the sequence.
type CancelDone struct {
	ID       ID
	WasReady bool
}

// SenderRefused says a frame for transfer ID came from connection Peer,
// which presented another identity than the reservation's sender: the
// Table changed nothing and answered the connection exactly as for an id
// it never reserved (CodeUnknownID, for an OPEN, DATA or COMMIT), so that
// the sender learns nothing of another prefill's reservation. The edge
// counts and logs it (CodeSender names it there); it is what a prefill
// that learnt another transfer's id looks like from decode. It never
// goes on the wire.
type SenderRefused struct {
	ID                  ID
	Peer                uint64
	Type                Type
	Expected, Presented Identity
}

func (SendFrame) isAction()     {}
func (SenderRefused) isAction() {}
func (WriteKV) isAction()       {}
func (ComputeDigest) isAction() {}
func (MarkReady) isAction()     {}
func (Done) isAction()          {}
func (Release) isAction()       {}
func (Fail) isAction()          {}
func (CancelDone) isAction()    {}
