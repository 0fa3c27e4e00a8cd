package transfer

import (
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
