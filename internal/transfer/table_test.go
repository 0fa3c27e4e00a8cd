package transfer

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// abortsTo returns the ABORT frames in acts addressed to peer.
func abortsTo(acts []Action, peer uint64) []*Frame {
	var out []*Frame
	for _, a := range acts {
		if s, ok := a.(SendFrame); ok && s.Peer == peer && s.Frame.Type == TypeAbort {
			out = append(out, s.Frame)
		}
	}
	return out
}

// reserveOne makes a Table holding one one-token reservation of tenant a
// that only sender may open (the zero Identity: any connection), and the
// OPEN that fits it: where each test of the sender binding starts.
func reserveOne(t *testing.T, sender Identity) (*Table, ID, *Frame) {
	t.Helper()
	tbl := NewTable(TableConfig{})
	id := NewID()
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: 1, Layers: 1, KVDim: 8, Deadline: time.Minute, Sender: sender}); err != nil {
		t.Fatal(err)
	}
	return tbl, id, &Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: 1, Layers: 1, KVDim: 8}
}

// TestUnopenedFailureAnswered: a reservation that failed before any
// stream opened it (its lease ran out, or the router cancelled it) is
// bound to no connection, so the Table answers whichever connection
// later claims it with the failure, as it does for a bound one: the
// sender learns the real reason at once instead of hearing nothing until
// its own lease ends (and holding its pages until then).
func TestUnopenedFailureAnswered(t *testing.T) {
	for _, how := range []string{"lease", "cancel"} {
		tbl := NewTable(TableConfig{})
		id := NewID()
		if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: 4, Layers: 1, KVDim: 8, Deadline: time.Second}); err != nil {
			t.Fatal(err)
		}
		code := CodeTimeout
		if how == "lease" {
			tbl.Step(Tick{Now: 2 * time.Second})
		} else {
			code = CodeTooLong
			tbl.Step(Cancel{ID: id, Reason: errkind.New(errkind.BadInput, code, "prompt too long")})
		}
		if tbl.Live() != 0 {
			t.Fatalf("%s: %d live after the failure", how, tbl.Live())
		}
		const peer = 7
		got := abortsTo(tbl.Step(FrameIn{Peer: peer, Frame: &Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: 4, Layers: 1, KVDim: 8}}), peer)
		if len(got) != 1 || got[0].ID != id || got[0].Code != code {
			t.Fatalf("%s: OPEN for the failed reservation answered with %+v; want one ABORT %s", how, got, code)
		}
		// An ABORT is never answered.
		if out := tbl.Step(FrameIn{Peer: peer, Frame: &Frame{Type: TypeAbort, ID: id}}); len(out) != 0 {
			t.Fatalf("%s: ABORT answered with %v", how, out)
		}
	}
}

// heard is what connection peer hears from acts: the frames sent to it,
// with the transfer id cleared, so that the answers about two ids compare.
func heard(acts []Action, peer uint64) []Frame {
	var out []Frame
	for _, a := range acts {
		if s, ok := a.(SendFrame); ok && s.Peer == peer {
			f := *s.Frame
			f.ID = ID{}
			out = append(out, f)
		}
	}
	return out
}

// heardForUnknown is what connection peer hears for f sent under an id
// tbl never reserved. Such a frame changes nothing in tbl (f is not a
// router's CANCEL), so it may be asked of the table under test.
func heardForUnknown(tbl *Table, peer uint64, from Identity, f *Frame) []Frame {
	g := *f
	g.ID = NewID()
	return heard(tbl.Step(FrameIn{Peer: peer, From: from, Frame: &g}), peer)
}

// TestOnlyTheReservedSenderMayOpen: a reservation that names its sender
// (the prefill the router chose) takes nothing from a connection that
// presents another identity, however well the frames fit: its OPEN does
// not bind the transfer, its DATA, COMMIT and ABORT do not fail it. The
// rogue hears what it would for an id decode never reserved (one ABORT
// CodeUnknownID per frame, none for its ABORT), and the edge alone is
// told each time, with both identities (SenderRefused). The chosen sender then opens the transfer as if
// nothing had come, and once it finished the rogue still learns nothing
// of its verdict.
func TestOnlyTheReservedSenderMayOpen(t *testing.T) {
	chosen, rogue := Identity{1, 2, 3}, Identity{9, 9, 9}
	tbl, id, open := reserveOne(t, chosen)
	hostile := []*Frame{
		open,
		{Type: TypeData, ID: id, Seq: 0, TokFrom: 0, TokTo: 1, LayerFrom: 0, LayerTo: 1, Payload: make([]byte, 8*8)},
		{Type: TypeCommit, ID: id, Tokens: 1, Frames: 1},
		{Type: TypeAbort, ID: id, Code: "rogue"},
	}
	refuse := func(when string) {
		t.Helper()
		for _, f := range hostile {
			for _, from := range []Identity{rogue, {}} { // a connection with no identity is no one's
				const peer = 5
				acts := tbl.Step(FrameIn{Peer: peer, From: from, Frame: f})
				var aborts []*Frame
				refused := 0
				for _, a := range acts {
					switch a := a.(type) {
					case SendFrame:
						if a.Peer != peer || a.Frame.Type != TypeAbort {
							t.Fatalf("%s: rogue %v caused %+v", when, f.Type, a)
						}
						aborts = append(aborts, a.Frame)
					case SenderRefused:
						if a.ID != id || a.Peer != peer || a.Type != f.Type || a.Expected != chosen || a.Presented != from {
							t.Fatalf("%s: rogue %v refused as %+v", when, f.Type, a)
						}
						refused++
					default:
						t.Fatalf("%s: rogue %v caused %T %+v", when, f.Type, a, a)
					}
				}
				if refused != 1 {
					t.Fatalf("%s: rogue %v: %d SenderRefused, want 1", when, f.Type, refused)
				}
				if f.Type == TypeAbort {
					if len(aborts) != 0 {
						t.Fatalf("%s: rogue ABORT answered with %+v", when, aborts)
					}
					continue
				}
				if len(aborts) != 1 || aborts[0].ID != id || aborts[0].Code != CodeUnknownID ||
					strings.Contains(aborts[0].Reason, chosen.Short()) {
					t.Fatalf("%s: rogue %v answered with %+v; want one ABORT %s, naming no prefill", when, f.Type, aborts, CodeUnknownID)
				}
			}
		}
	}
	refuse("before OPEN")
	if r := tbl.Receiver(id); r == nil || !r.Unopened() {
		t.Fatalf("after the rogue's frames the reservation is %v; want it live and unopened", r)
	}
	const honest = 3
	acts := tbl.Step(FrameIn{Peer: honest, From: chosen, Frame: open})
	if len(acts) != 1 || acts[0].(SendFrame).Frame.Type != TypeHello {
		t.Fatalf("the chosen sender's OPEN after the rogue's: %+v; want HELLO", acts)
	}
	refuse("after OPEN")
	acts = tbl.Step(FrameIn{Peer: honest, From: chosen, Frame: &Frame{Type: TypeAbort, ID: id, Code: "x"}})
	if tbl.Live() != 0 || len(acts) == 0 {
		t.Fatalf("the chosen sender's own ABORT did not end the transfer: %+v", acts)
	}
	refuse("after the end") // a rogue learns nothing of the verdict either
}

// TestReservationWithoutSender: a reservation that names no sender (a
// router from before the binding) takes its OPEN from any prefill
// connection, as before.
func TestReservationWithoutSender(t *testing.T) {
	tbl, _, open := reserveOne(t, Identity{})
	acts := tbl.Step(FrameIn{Peer: 3, From: Identity{7}, Frame: open})
	if len(acts) != 1 || acts[0].(SendFrame).Frame.Type != TypeHello {
		t.Fatalf("OPEN for a reservation without a sender: %+v; want HELLO", acts)
	}
}

// TestExpectMovesOnlyAnUnopenedReservation: the router may name another
// sender while nothing opened the transfer (its first prefill never
// started), never once a sender opened it; the old sender is refused
// from then on, the new one taken.
func TestExpectMovesOnlyAnUnopenedReservation(t *testing.T) {
	first, second := Identity{1}, Identity{2}
	tbl, id, open := reserveOne(t, first)
	if err := tbl.Expect(NewID(), Identity{}, second); err == nil {
		t.Fatal("Expect for an id not reserved here succeeded")
	}
	if err := tbl.Expect(id, Identity{}, second); err != nil {
		t.Fatal(err)
	}
	if got := abortsTo(tbl.Step(FrameIn{Peer: 3, From: first, Frame: open}), 3); len(got) != 1 || got[0].Code != CodeUnknownID {
		t.Fatalf("the replaced sender's OPEN: %+v; want ABORT %s", got, CodeUnknownID)
	}
	if acts := tbl.Step(FrameIn{Peer: 4, From: second, Frame: open}); len(acts) != 1 || acts[0].(SendFrame).Frame.Type != TypeHello {
		t.Fatalf("the new sender's OPEN: %+v; want HELLO", acts)
	}
	if err := tbl.Expect(id, Identity{}, first); err == nil {
		t.Fatal("Expect moved a transfer its sender had already opened")
	}
}

// TestExpectNeverUnbinds: renaming a reservation's sender must name
// someone. The zero Identity means "any prefill connection", so an Expect
// to it would turn a reservation bound to one prefill back into a bearer
// key that any prefill who learnt the id could open; it is refused, and
// the reservation stays bound to the sender it had.
func TestExpectNeverUnbinds(t *testing.T) {
	chosen, rogue := Identity{1}, Identity{9}
	tbl, id, open := reserveOne(t, chosen)
	if err := tbl.Expect(id, Identity{}, Identity{}); err == nil {
		t.Fatal("Expect to the zero identity (no one) succeeded")
	}
	if got := abortsTo(tbl.Step(FrameIn{Peer: 3, From: rogue, Frame: open}), 3); len(got) != 1 || got[0].Code != CodeUnknownID {
		t.Fatalf("another prefill's OPEN after the refused Expect: %+v; want ABORT %s", got, CodeUnknownID)
	}
	if acts := tbl.Step(FrameIn{Peer: 4, From: chosen, Frame: open}); len(acts) != 1 || acts[0].(SendFrame).Frame.Type != TypeHello {
		t.Fatalf("the chosen sender's OPEN: %+v; want HELLO", acts)
	}
}

// Only the router cancels by frame. A CANCEL on any other connection, the
// reserved prefill's own included, is answered with an ABORT to that
// connection and changes nothing; the router's is acknowledged with
// CANCELLED and fails the transfer.
func TestOnlyTheRouterCancelsByFrame(t *testing.T) {
	chosen := Identity{1, 2, 3}
	tbl, id, open := reserveOne(t, chosen)
	cancel := &Frame{Type: TypeCancel, ID: id, Code: CodeCancelled, Reason: "client went away"}
	for _, from := range []Identity{chosen, {9}, {}} {
		acts := tbl.Step(FrameIn{Peer: 5, From: from, Frame: cancel})
		if len(acts) != 1 {
			t.Fatalf("a CANCEL from %s caused %+v; want one ABORT", from.Short(), acts)
		}
		sf, ok := acts[0].(SendFrame)
		if !ok || sf.Peer != 5 || sf.Frame.Type != TypeAbort || sf.Frame.Code != CodeProtocol {
			t.Fatalf("a CANCEL from %s caused %+v; want an ABORT of code %s to it", from.Short(), acts[0], CodeProtocol)
		}
	}
	if r := tbl.Receiver(id); r == nil || !r.Unopened() {
		t.Fatal("a refused CANCEL changed the reservation")
	}
	for _, a := range tbl.Step(FrameIn{Peer: 6, From: chosen, Frame: open}) {
		if sf, ok := a.(SendFrame); !ok || sf.Frame.Type == TypeAbort {
			t.Fatalf("the chosen prefill's OPEN after refused CANCELs caused %T %+v", a, a)
		}
	}
	if r := tbl.Receiver(id); r == nil || r.Unopened() {
		t.Fatal("the chosen prefill's OPEN did not open the transfer")
	}
	var cancelled, failed bool
	for _, a := range tbl.Step(FrameIn{Peer: 7, Router: true, Frame: cancel}) {
		switch a := a.(type) {
		case SendFrame:
			cancelled = cancelled || a.Peer == 7 && a.Frame.Type == TypeCancelled
		case Fail:
			failed = a.ID == id
		}
	}
	if !cancelled || !failed {
		t.Fatalf("the router's CANCEL: acknowledged %v, transfer failed %v; want both", cancelled, failed)
	}
}
