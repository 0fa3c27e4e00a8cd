package transfer

// The intruder scenario's hostile peers: a rogue prefill that learnt a
// transfer id, a rogue router (another router certificate) that learnt it
// too, and other connections that send for an opened transfer.

import (
	"fmt"
	"reflect"
)

// intrude has another authenticated connection, one that learnt x's id,
// send frames for it once prefill's connection opened it: a rival OPEN
// for another tenant, altered DATA, a COMMIT and an ABORT. The connection
// is a rogue prefill's or, half the time, another one of the chosen
// prefill's own (so only the binding to the connection stops it). Decode
// may answer the intruder (an ABORT) and nothing else: the transfer must
// go on as if nothing came (mustSucceed).
func (w *world) intrude(x *simXfer) {
	peer, from := uint64(900+x.idx), simRogue
	if w.rng.IntN(2) == 0 {
		from = simPrefill
	}
	hostile := []*Frame{
		{Type: TypeOpen, ID: x.id, Tenant: "intruder", Tokens: uint32(x.n), Layers: uint16(w.layers), KVDim: uint32(w.kvdim)},
		{Type: TypeCommit, ID: x.id, Tokens: uint32(x.n), Frames: 1},
		{Type: TypeAbort, ID: x.id, Code: "intruder"},
		{Type: TypeCancel, ID: x.id, Code: CodeCancelled, Reason: "intruder"},
	}
	for _, b := range x.recorded {
		if f, err := Decode(b, w.maxFrame); err == nil && f.Type == TypeData {
			hostile = append(hostile, w.forge(f))
			break
		}
	}
	for _, f := range hostile {
		b, err := f.Encode(nil, w.maxFrame)
		if err != nil {
			panic(err)
		}
		if f, err = Decode(b, w.maxFrame); err != nil {
			panic(err)
		}
		w.intruderStep(x, peer, from, f)
	}
}

// intrudeEarly is a rogue prefill, another holder of a prefill
// certificate that learnt x's id, claiming the reservation before (or
// while) the chosen prefill opens it: an OPEN that matches the
// reservation in every field, a DATA frame of the right shape, a COMMIT,
// an ABORT and a CANCEL, in random order. Without the sender check its OPEN
// would bind the transfer to it, and its ABORT or early DATA or COMMIT
// would fail it; with it, the rogue hears only what it would for an id
// never reserved, and the chosen prefill then completes the transfer
// (mustSucceed). Among its frames, a rogue router tries to hand the
// reservation to the rogue prefill (Expect) and to cancel it by frame:
// refused as for an unknown id, or the rogue's OPEN that follows would
// take the transfer.
func (w *world) intrudeEarly(x *simXfer) {
	peer := uint64(800 + x.idx)
	cells := w.layers
	hostile := []*Frame{
		{Type: TypeOpen, ID: x.id, Tenant: x.tenant, Tokens: uint32(x.n), Layers: uint16(w.layers), KVDim: uint32(w.kvdim), Window: uint32(w.sendWindow)},
		{Type: TypeData, ID: x.id, Seq: 0, TokFrom: 0, TokTo: 1, LayerFrom: 0, LayerTo: uint16(w.layers), Payload: make([]byte, cells*8*w.kvdim)},
		{Type: TypeCommit, ID: x.id, Tokens: uint32(x.n), Frames: 1},
		{Type: TypeAbort, ID: x.id, Code: "rogue"},
		{Type: TypeCancel, ID: x.id, Code: CodeCancelled, Reason: "rogue"},
	}
	hostile = append(hostile, nil) // the rogue router's turn
	w.rng.Shuffle(len(hostile), func(i, j int) { hostile[i], hostile[j] = hostile[j], hostile[i] })
	for _, f := range hostile {
		if f == nil {
			w.rogueRouter(x)
			continue
		}
		if f.Type == TypeData && len(f.Payload) > w.maxFrame-64 {
			continue // one token of every layer does not fit this frame size
		}
		b, err := f.Encode(nil, w.maxFrame)
		if err != nil {
			panic(err)
		}
		if f, err = Decode(b, w.maxFrame); err != nil {
			panic(err)
		}
		w.logf("x%d rogue -> %v", x.idx, f.Type)
		w.intruderStep(x, peer, simRogue, f)
	}
}

// simNeverReserved is a transfer id the simulation never reserves: what a
// connection hears for it is what it hears for an unknown id.
var simNeverReserved = ID{0xff, 'n', 'e', 'v', 'e', 'r'}

// rogueRouter is another router certificate that learnt x's id: it names
// the rogue prefill as x's sender (Expect) and sends a CANCEL frame. Each
// must be answered exactly as for an id decode never reserved (the same
// error; a bare CANCELLED) and change nothing.
func (w *world) rogueRouter(x *simXfer) {
	const peer = 2 // a router's connection, not routerPeer
	w.logf("x%d rogue router -> expect, cancel", x.idx)
	if err, unknown := w.table.Expect(x.id, simRogueRouter, simRogue), w.table.Expect(simNeverReserved, simRogueRouter, simRogue); fmt.Sprint(err) != fmt.Sprint(unknown) {
		w.violate("x%d: a rogue router's Expect answered %v; for an unknown id %v", x.idx, err, unknown)
	}
	acts := w.table.Step(FrameIn{Peer: peer, From: simRogueRouter, Router: true, Frame: &Frame{Type: TypeCancel, ID: x.id, Code: CodeCancelled, Reason: "rogue router"}})
	if len(acts) != 1 {
		w.violate("x%d: a rogue router's CANCEL caused %+v; want only CANCELLED", x.idx, acts)
	} else if sf, ok := acts[0].(SendFrame); !ok || sf.Peer != peer || sf.Frame.Type != TypeCancelled {
		w.violate("x%d: a rogue router's CANCEL caused %T %+v; want only CANCELLED", x.idx, acts[0], acts[0])
	}
}

// heardAsUnknown is what connection peer, presenting from, hears for f
// under simNeverReserved (nothing changes: f is not the router's CANCEL).
func (w *world) heardAsUnknown(peer uint64, from Identity, f *Frame) []Frame {
	g := *f
	g.ID = simNeverReserved
	return heard(w.table.Step(FrameIn{Peer: peer, From: from, Frame: &g}), peer)
}

// intruderStep feeds one intruder frame to decode: the only actions it
// may cause are an ABORT to the intruder (never for its own ABORT) and,
// for a rogue prefill's, SenderRefused for the edge to count; and a rogue
// prefill hears exactly what it would for an id never reserved.
func (w *world) intruderStep(x *simXfer, peer uint64, from Identity, f *Frame) {
	var want []Frame
	if from == simRogue {
		want = w.heardAsUnknown(peer, from, f)
	}
	acts := w.table.Step(FrameIn{Peer: peer, From: from, Frame: f})
	if got := heard(acts, peer); from == simRogue && !reflect.DeepEqual(got, want) {
		w.violate("x%d: a rogue prefill's %v heard %+v; for an unknown id it hears %+v", x.idx, f.Type, got, want)
	}
	for _, a := range acts {
		switch a := a.(type) {
		case SendFrame:
			if a.Peer == peer && a.Frame.Type == TypeAbort && f.Type != TypeAbort {
				continue
			}
		case SenderRefused:
			if a.Peer == peer && from == simRogue && a.Expected == simPrefill && a.Presented == simRogue && a.ID == x.id {
				continue
			}
		}
		w.violate("x%d: an intruder's %v (from %s) caused %T %+v", x.idx, f.Type, from.Short(), a, a)
	}
}
