package transfer

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Tests of what a peer that is not a reservation's owner can learn or do:
// a prefill other than the one the reservation names, and a router other
// than the one that made it.

// settle answers the edge's actions in acts as decodesrv does, at once:
// every WriteKV with WriteDone, a ComputeDigest with DigestDone carrying
// sum. It returns every action seen, the answers' included.
func settle(tbl *Table, acts []Action, sum [32]byte) []Action {
	var all []Action
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		all = append(all, a)
		switch a := a.(type) {
		case WriteKV:
			acts = append(acts, tbl.Step(WriteDone{ID: a.ID, Seq: a.Seq})...)
		case ComputeDigest:
			acts = append(acts, tbl.Step(DigestDone{ID: a.ID, Sum: sum})...)
		}
	}
	return all
}

// ownedReservation is a one-token reservation in one of the states a rogue
// may find it in, named sender and made by router, with the honest
// sender's connection numbered 3.
func ownedReservation(t *testing.T, state string, sender, router Identity) (*Table, ID) {
	t.Helper()
	tbl := NewTable(TableConfig{})
	id := NewID()
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: 1, Layers: 1, KVDim: 8, Deadline: time.Second, Sender: sender, Router: router}); err != nil {
		t.Fatal(err)
	}
	step := func(f *Frame) { settle(tbl, tbl.Step(FrameIn{Peer: 3, From: sender, Frame: f}), [32]byte{7}) }
	switch state {
	case "reserved":
	case "expired": // failed before any OPEN: answers any connection with its verdict
		tbl.Step(Tick{Now: 2 * time.Second})
	case "open", "ready", "aborted":
		step(&Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: 1, Layers: 1, KVDim: 8})
		switch state {
		case "ready":
			step(&Frame{Type: TypeData, ID: id, Seq: 0, TokFrom: 0, TokTo: 1, LayerFrom: 0, LayerTo: 1, Payload: make([]byte, 2*8*4)})
			step(&Frame{Type: TypeCommit, ID: id, Tokens: 1, Frames: 1, Digest: [32]byte{7}})
			if tbl.Live() != 0 || tbl.Remembered() != 1 {
				t.Fatalf("the honest transfer did not end Ready: %d live", tbl.Live())
			}
		case "aborted":
			step(&Frame{Type: TypeAbort, ID: id, Code: "x"})
		}
	default:
		t.Fatalf("no state %q", state)
	}
	return tbl, id
}

// TestWrongSenderHearsWhatAnUnknownIDHears: a prefill that holds the id of
// a reservation made for another prefill hears, for every frame it may
// send and in every state the reservation may be in, exactly what it
// hears for an id decode never reserved: the same frames, codes and
// reasons, in the same step (the core has no other notion of time), and
// nothing at all that changes state. So it cannot tell "reserved for
// someone else" (or "open", "verified", "failed", and for whom) from
// "unknown". The edge alone hears SenderRefused, with both identities,
// for its metrics and logs.
func TestWrongSenderHearsWhatAnUnknownIDHears(t *testing.T) {
	chosen, rogue := Identity{1, 2, 3}, Identity{9, 9, 9}
	for _, state := range []string{"reserved", "open", "ready", "aborted", "expired"} {
		tbl, id := ownedReservation(t, state, chosen, Identity{})
		frames := []*Frame{
			{Type: TypeOpen, ID: id, Tenant: "a", Tokens: 1, Layers: 1, KVDim: 8},
			{Type: TypeData, ID: id, Seq: 0, TokFrom: 0, TokTo: 1, LayerFrom: 0, LayerTo: 1, Payload: make([]byte, 2*8*4)},
			{Type: TypeCommit, ID: id, Tokens: 1, Frames: 1},
			{Type: TypeAbort, ID: id, Code: "rogue"},
			{Type: TypeAck, ID: id},
			{Type: TypeCredit, ID: id, Credit: 1},
			{Type: TypeCancel, ID: id, Code: CodeCancelled},
		}
		for _, f := range frames {
			for _, from := range []Identity{rogue, {}} {
				live, remembered := tbl.Live(), tbl.Remembered()
				const peer = 5
				want := heardForUnknown(tbl, peer, from, f)
				acts := tbl.Step(FrameIn{Peer: peer, From: from, Frame: f})
				if got := heard(acts, peer); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: a rogue's %v heard %+v; for an unknown id it hears %+v", state, f.Type, got, want)
				}
				for _, a := range acts {
					switch a := a.(type) {
					case SendFrame:
						if a.Peer != peer {
							t.Errorf("%s: a rogue's %v sent %+v to connection %d", state, f.Type, a.Frame, a.Peer)
						}
					case SenderRefused:
						if a.Expected != chosen || a.Presented != from {
							t.Errorf("%s: a rogue's %v refused as %+v", state, f.Type, a)
						}
					default:
						t.Errorf("%s: a rogue's %v caused %T %+v", state, f.Type, a, a)
					}
				}
				if tbl.Live() != live || tbl.Remembered() != remembered {
					t.Errorf("%s: a rogue's %v changed the table: live %d->%d, remembered %d->%d", state, f.Type, live, tbl.Live(), remembered, tbl.Remembered())
				}
			}
		}
		if state == "reserved" {
			if r := tbl.Receiver(id); r == nil || !r.Unopened() {
				t.Fatalf("the rogue's frames disturbed the reservation: %v", r)
			}
		}
	}
}

// TestOnlyTheReservingRouterMovesOrCancels: a reservation is the router's
// that made it. Another router (another certificate of the router role)
// that holds the id can neither rename its sender (Expect) nor cancel it,
// by a Cancel or by a CANCEL frame, and is answered exactly as for an id
// decode holds nothing for: the same error, or the same bare
// acknowledgement, never whether the transfer is live, open or verified.
// The owner can do both, and decode's own (Local) cancel acts on any
// reservation.
func TestOnlyTheReservingRouterMovesOrCancels(t *testing.T) {
	owner, other, chosen, moved := Identity{0xa}, Identity{0xb}, Identity{1}, Identity{2}
	for _, state := range []string{"reserved", "open", "ready"} {
		tbl, id := ownedReservation(t, state, chosen, owner)
		unknown := tbl.Expect(NewID(), other, moved)
		err := tbl.Expect(id, other, moved)
		if fmt.Sprint(err) != fmt.Sprint(unknown) || errkind.Of(err).Code != errkind.Of(unknown).Code {
			t.Errorf("%s: another router's Expect: %v; for an unknown id: %v", state, err, unknown)
		}
		live, remembered := tbl.Live(), tbl.Remembered()
		if acts := tbl.Step(Cancel{ID: id, Router: other}); !reflect.DeepEqual(acts, []Action{CancelDone{ID: id}}) {
			t.Errorf("%s: another router's Cancel caused %+v; want only a bare CancelDone", state, acts)
		}
		acts := tbl.Step(FrameIn{Peer: 8, From: other, Router: true, Frame: &Frame{Type: TypeCancel, ID: id, Code: CodeCancelled}})
		if got := heard(acts, 8); len(acts) != 1 || len(got) != 1 || got[0].Type != TypeCancelled {
			t.Errorf("%s: another router's CANCEL frame caused %+v; want only CANCELLED", state, acts)
		}
		if tbl.Live() != live || tbl.Remembered() != remembered {
			t.Errorf("%s: another router changed the table: live %d->%d, remembered %d->%d", state, live, tbl.Live(), remembered, tbl.Remembered())
		}
		if state != "reserved" {
			continue
		}
		// The owner renames, then cancels: its transfer fails as cancelled.
		if err := tbl.Expect(id, owner, moved); err != nil {
			t.Fatalf("the owner's Expect: %v", err)
		}
		if r := tbl.Receiver(id); r == nil || r.Sender() != moved {
			t.Fatalf("the owner's Expect did not move the reservation")
		}
		var failed bool
		for _, a := range tbl.Step(Cancel{ID: id, Router: owner}) {
			if f, ok := a.(Fail); ok && f.ID == id && f.Err.Code == CodeCancelled {
				failed = true
			}
		}
		if !failed || tbl.Live() != 0 {
			t.Fatalf("the owner's Cancel did not end its reservation (%d live)", tbl.Live())
		}
	}
	tbl, id := ownedReservation(t, "open", chosen, owner)
	var failed bool
	for _, a := range settle(tbl, tbl.Step(Cancel{ID: id, Local: true}), [32]byte{}) {
		_, ok := a.(Fail)
		failed = failed || ok
	}
	if !failed || tbl.Live() != 0 {
		t.Fatalf("decode's own cancel did not end the reservation (%d live)", tbl.Live())
	}
}

// TestLostRoutersReservationsExpire: a router that comes back with a new
// certificate is another router, and can no longer cancel what it
// reserved before; those reservations end by their lease all the same,
// their pages released, whatever that router tried meanwhile.
func TestLostRoutersReservationsExpire(t *testing.T) {
	before, after := Identity{0xa}, Identity{0xc}
	for _, state := range []string{"reserved", "open"} {
		tbl, id := ownedReservation(t, state, Identity{1}, before)
		tbl.Step(Cancel{ID: id, Router: after})
		if err := tbl.Expect(id, after, Identity{5}); err == nil {
			t.Fatalf("%s: the restarted router moved its old reservation", state)
		}
		if tbl.Live() != 1 {
			t.Fatalf("%s: %d live before the lease ran out", state, tbl.Live())
		}
		var failed, released bool
		for _, a := range settle(tbl, tbl.Step(Tick{Now: time.Second}), [32]byte{}) {
			switch a := a.(type) {
			case Fail:
				failed = a.Err.Code == CodeTimeout
			case Release:
				released = a.ID == id
			}
		}
		if !failed || !released || tbl.Live() != 0 {
			t.Fatalf("%s: at the deadline: failed %v, released %v, %d live; want the lease to end it", state, failed, released, tbl.Live())
		}
	}
}

// TestReplayedIDRefusalSaysNothingOfState: reserving an id that is live
// and one that finished are refused in the same words, so another router
// that reserves an id it learnt finds out only that it is taken.
func TestReplayedIDRefusalSaysNothingOfState(t *testing.T) {
	live, liveID := ownedReservation(t, "open", Identity{1}, Identity{0xa})
	done, doneID := ownedReservation(t, "ready", Identity{1}, Identity{0xa})
	a, b := live.Check(liveID), done.Check(doneID)
	if a == nil || b == nil || a.Error() != b.Error() || errkind.Of(a).Code != CodeReplayed {
		t.Fatalf("a live id: %v; a finished one: %v; want the same %s refusal", a, b, CodeReplayed)
	}
}
