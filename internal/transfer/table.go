package transfer

import (
	"errors"
	"slices"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// TableConfig bounds what a Table remembers about finished transfers.
type TableConfig struct {
	// Remember is how long a finished id stays known (refused if reserved
	// again, answered if its sender retransmits); 0: DefaultRemember.
	Remember time.Duration
	// RememberMax caps the finished ids kept; the oldest go first. 0:
	// DefaultRememberMax.
	RememberMax int
}

// Defaults for TableConfig.
const (
	DefaultRemember    = 10 * time.Minute
	DefaultRememberMax = 1 << 16
)

type finished struct {
	id     ID
	at     time.Duration
	ready  bool
	peer   uint64
	sender Identity // the reservation's; zero: any connection
	router Identity // the reservation's (Reservation.Router)
	err    *errkind.Error
}

// Table is a decode server's registry of transfers: the Receivers of live
// reservations and a bounded memory of finished ids. It refuses frames and
// reservations for ids it did not reserve or has already used, and routes
// every event to its Receiver. It is a pure state machine like the
// Receivers it owns; one goroutine drives it.
//
// Peer numbers are the edge's; 0 means "no connection" and must not be
// used for a real one.
type Table struct {
	cfg   TableConfig
	now   time.Duration
	live  map[ID]*Receiver
	order []ID // live ids in reservation order, so Tick is deterministic
	done  map[ID]*finished
	fifo  []*finished
}

// NewTable returns an empty table.
func NewTable(cfg TableConfig) *Table {
	if cfg.Remember <= 0 {
		cfg.Remember = DefaultRemember
	}
	if cfg.RememberMax <= 0 {
		cfg.RememberMax = DefaultRememberMax
	}
	return &Table{cfg: cfg, live: map[ID]*Receiver{}, done: map[ID]*finished{}}
}

// ErrReplayed is wrapped by the error Check and Reserve return for an id
// that is live or was used recently.
var ErrReplayed = errors.New("transfer id already used")

// Check says whether id may be reserved: it fails for the zero id and for
// an id live or recently finished here. Call it before allocating pages.
// Both refusals read the same: a router that reserves an id another
// router holds learns that the id is taken (it must), not whether that
// transfer is still running.
func (t *Table) Check(id ID) error {
	if id.IsZero() {
		return errf(errkind.BadInput, CodeProtocol, "zero transfer id")
	}
	_, live := t.live[id]
	if _, done := t.done[id]; live || done {
		return errkind.Wrap(errkind.BadInput, CodeReplayed, ErrReplayed, "kv transfer: transfer id is in use or was used recently")
	}
	return nil
}

// Reserve registers a reservation whose pages the edge has allocated. On
// error nothing is registered, and the edge frees what it allocated.
func (t *Table) Reserve(res Reservation) error {
	if err := t.Check(res.ID); err != nil {
		return err
	}
	if res.Tokens <= 0 || res.Layers <= 0 || res.KVDim <= 0 || res.Layers > 1<<15 {
		return errf(errkind.BadInput, CodeProtocol, "reservation of %d tokens, %d layers x %d kvdim", res.Tokens, res.Layers, res.KVDim)
	}
	t.live[res.ID] = newReceiver(res)
	t.order = append(t.order, res.ID)
	return nil
}

// Expect names the prefill that may send transfer id from now on, in
// place of the one the reservation named: the router moves a prefill leg
// that provably never started (its server could not be reached, or
// refused the prompt before computing anything) to another prefill
// server under the same reservation. router is who asks: only the router
// that made the reservation (Reservation.Router) may move it, and any
// other gets exactly the refusal of an id that is not live here, so that
// a second router's certificate can neither redirect another router's
// transfers nor learn which of them exist. It fails once a stream opened
// the transfer, since a sender that already began may not be replaced,
// and for an id that is not live here. It also fails for the zero
// Identity: that names no one, and would make the reservation a bearer
// key again, open to any prefill that learnt the id.
func (t *Table) Expect(id ID, router, sender Identity) error {
	if sender.IsZero() {
		return errf(errkind.BadInput, CodeProtocol, "a reservation can be moved only to a named prefill, not to any")
	}
	r := t.live[id]
	if r == nil || r.res.Router != router {
		return errf(errkind.BadInput, CodeUnknownID, "decode holds no live reservation for this transfer")
	}
	if !r.Unopened() {
		return errf(errkind.BadInput, CodeProtocol, "transfer was already opened by prefill %s; another prefill cannot take it over", r.res.Sender.Short())
	}
	r.res.Sender = sender
	return nil
}

// Receiver returns the live receiver for id, or nil.
func (t *Table) Receiver(id ID) *Receiver { return t.live[id] }

// Live is the number of reservations not yet retired: not Ready, and not
// failed-and-released.
func (t *Table) Live() int { return len(t.live) }

// Remembered is the number of finished ids kept.
func (t *Table) Remembered() int { return len(t.done) }

// Step routes one event and returns the actions it calls for.
func (t *Table) Step(ev Event) []Action {
	var out []Action
	switch e := ev.(type) {
	case Tick:
		if e.Now > t.now {
			t.now = e.Now
		}
		for _, id := range slices.Clone(t.order) {
			out = t.stepOne(out, id, e)
		}
		t.forget()
	case PeerLost:
		for _, id := range slices.Clone(t.order) {
			out = t.stepOne(out, id, e)
		}
	case FrameIn:
		if e.Frame == nil {
			return nil
		}
		out = t.frame(out, e)
	case BadFrame:
		var fe *FrameError
		if errors.As(e.Err, &fe) && fe.HasID {
			out = t.stepOne(out, fe.ID, e)
		}
	case Cancel:
		if r, ok := t.live[e.ID]; ok {
			if !e.Local && r.res.Router != e.Router {
				// Another router's reservation: left as it is, and
				// acknowledged as an id held for nothing is, except
				// that nothing is remembered (the id is live).
				return append(out, CancelDone{ID: e.ID})
			}
			return t.stepOne(out, e.ID, e)
		}
		fin := t.done[e.ID]
		if fin != nil && !e.Local && fin.router != e.Router {
			return append(out, CancelDone{ID: e.ID}) // nor whether it verified
		}
		if fin == nil && !e.ID.IsZero() {
			// A cancel that overtook its RESERVE: remember the id as
			// failed, so that the RESERVE is refused when it comes
			// instead of holding pages until its lease runs out, and a
			// sender that opens it hears why (frame).
			t.remember(&finished{id: e.ID, at: t.now, err: cancelReason(e.Reason)})
		}
		out = append(out, CancelDone{ID: e.ID, WasReady: fin != nil && fin.ready})
	case WriteDone:
		out = t.stepOne(out, e.ID, e)
	case DigestDone:
		out = t.stepOne(out, e.ID, e)
	}
	return out
}

func (t *Table) frame(out []Action, e FrameIn) []Action {
	f := e.Frame
	if f.Type == TypeCancel {
		if !e.Router {
			// The edge keeps router frames off prefill connections too
			// (decodesrv's fromPrefill); this holds if it ever does not.
			return append(out, SendFrame{Peer: e.Peer, Frame: abortFrame(f.ID,
				errf(errkind.BadInput, CodeProtocol, "only the router may cancel a transfer"))})
		}
		// The router's cancel, acknowledged on its own connection whatever
		// the transfer's state (and whoever's it is: Cancel acts only on
		// the reservations of the router the connection presents).
		for _, a := range t.Step(Cancel{ID: f.ID, Reason: fromFrame(f, "the router"), Router: e.From}) {
			if _, ok := a.(CancelDone); !ok {
				out = append(out, a)
			}
		}
		return append(out, SendFrame{Peer: e.Peer, Frame: &Frame{Type: TypeCancelled, ID: f.ID}})
	}
	if _, ok := t.live[f.ID]; ok {
		return t.stepOne(out, f.ID, e)
	}
	if fin, ok := t.done[f.ID]; ok {
		if !fin.sender.IsZero() && e.From != fin.sender {
			return refuseSender(out, f.ID, e.Peer, fin.sender, e.From, f)
		}
		// Only the connection the transfer was bound to learns its
		// verdict; one that failed before any OPEN bound it (its lease
		// ran out, or it was cancelled) answers whoever claims the id, so
		// a late sender hears why instead of nothing until its own lease.
		if fin.peer != 0 && e.Peer != fin.peer || f.Type == TypeAbort {
			return out
		}
		if fin.ready {
			if f.Type == TypeCommit {
				out = append(out, SendFrame{Peer: e.Peer, Frame: &Frame{Type: TypeAck, ID: f.ID}})
			}
			return out
		}
		return append(out, SendFrame{Peer: e.Peer, Frame: abortFrame(f.ID, fin.err)})
	}
	// Not reserved here (or forgotten, or this server restarted): refuse.
	return unknownID(out, f.ID, e.Peer, f.Type)
}

// errUnknownID is the refusal of a frame for an id decode holds no
// reservation for, and (refuseSender) of one for a reservation that names
// another prefill: the two must read the same.
func errUnknownID() *errkind.Error {
	return errf(errkind.BadInput, CodeUnknownID, "decode holds no reservation for this transfer")
}

// unknownID answers a frame of type typ for an id the connection may know
// nothing about: an ABORT for an OPEN, DATA or COMMIT, and nothing for
// any other type (never answer an ABORT, ACK or reply with another).
func unknownID(out []Action, id ID, peer uint64, typ Type) []Action {
	switch typ {
	case TypeOpen, TypeData, TypeCommit:
		return append(out, SendFrame{Peer: peer, Frame: abortFrame(id, errUnknownID())})
	}
	return out
}

// stepOne steps id's receiver, if live, and retires it once it is Ready or
// failed and released.
func (t *Table) stepOne(out []Action, id ID, ev Event) []Action {
	r := t.live[id]
	if r == nil {
		return out
	}
	out = append(out, r.step(ev)...)
	if r.state == rReady || (r.state == rFailed && r.released) {
		delete(t.live, id)
		t.order = slices.DeleteFunc(t.order, func(x ID) bool { return x == id })
		t.remember(&finished{id: id, at: t.now, ready: r.state == rReady, peer: r.peer, sender: r.res.Sender, router: r.res.Router, err: r.err})
	}
	return out
}

// remember keeps a finished id, within the bounds of TableConfig.
func (t *Table) remember(fin *finished) {
	t.done[fin.id] = fin
	t.fifo = append(t.fifo, fin)
	t.forget()
}

// forget drops finished ids past their time or over the cap.
func (t *Table) forget() {
	drop := 0
	for drop < len(t.fifo) && (len(t.fifo)-drop > t.cfg.RememberMax || t.now-t.fifo[drop].at >= t.cfg.Remember) {
		delete(t.done, t.fifo[drop].id)
		drop++
	}
	if drop > 0 {
		t.fifo = slices.Delete(t.fifo, 0, drop)
	}
}
