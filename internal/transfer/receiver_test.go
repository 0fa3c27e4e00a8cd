package transfer

import (
	"testing"
	"time"
)

// Unit tests of the decode side's refusals, one rule each, so that
// removing a rule fails a test that names it (the simulation often
// catches the same bug later, through another check).

const (
	rtTokens, rtLayers, rtKVDim = 4, 2, 8
	rtPeer, rtIntruder          = 5, 6
	rtMaxFrame                  = 4096
)

// rtWire is f as decode's edge hands it over: encoded and decoded again,
// so that it carries a verified CRC like any frame off the wire.
func rtWire(t *testing.T, f *Frame) *Frame {
	t.Helper()
	b, err := f.Encode(nil, rtMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Decode(b, rtMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// rtData is DATA frame seq over tokens [tf, tt) x every layer, its payload
// filled with fill.
func rtData(t *testing.T, id ID, seq uint32, tf, tt int, fill byte) *Frame {
	t.Helper()
	p := make([]byte, (tt-tf)*rtLayers*8*rtKVDim)
	for i := range p {
		p[i] = fill
	}
	return rtWire(t, &Frame{Type: TypeData, ID: id, Seq: seq, TokFrom: uint32(tf), TokTo: uint32(tt),
		LayerFrom: 0, LayerTo: rtLayers, Payload: p})
}

// rtOpened is a Table with one reservation that rtPeer opened; the
// reservation offers window dw, the sender window pw.
func rtOpened(t *testing.T, dw, pw int) (*Table, ID) {
	t.Helper()
	tbl := NewTable(TableConfig{})
	id := NewID()
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim,
		Deadline: time.Minute, Window: dw, MaxFrameBytes: rtMaxFrame}); err != nil {
		t.Fatal(err)
	}
	open := rtWire(t, &Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim, Window: uint32(pw)})
	for _, a := range tbl.Step(FrameIn{Peer: rtPeer, Frame: open}) {
		if f, ok := a.(Fail); ok {
			t.Fatalf("OPEN failed: %v", f.Err)
		}
	}
	return tbl, id
}

// rtFailCode is the code of the Fail in acts, or "" if none; it also
// reports whether any WriteKV was asked for.
func rtFailCode(acts []Action) (code string, wrote bool) {
	for _, a := range acts {
		switch a := a.(type) {
		case Fail:
			code = a.Err.Code
		case WriteKV:
			wrote = true
		}
	}
	return code, wrote
}

// TestReceiverRefusals: each malformed or hostile DATA frame fails the
// transfer with its code, and none of them is written.
func TestReceiverRefusals(t *testing.T) {
	cases := []struct {
		name, code string
		dw, pw     int                                // windows: decode's, prefill's
		frames     func(t *testing.T, id ID) []*Frame // the last one is refused
	}{
		{"same seq, different bytes", CodeCoverage, 2, 2, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, 0, 0, 1, 1), rtData(t, id, 0, 0, 1, 2)}
		}},
		{"new seq over covered cells", CodeCoverage, 2, 2, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, 0, 0, 1, 1), rtData(t, id, 1, 0, 1, 1)}
		}},
		// A window wider than the reservation: only the range check is left.
		{"seq past the reservation's cells", CodeProtocol, 64, 64, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, rtTokens*rtLayers, 0, 1, 1)}
		}},
		{"seq past COMMIT's frame count", CodeProtocol, 2, 2, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtWire(t, &Frame{Type: TypeCommit, ID: id, Tokens: rtTokens, Frames: 1}), rtData(t, id, 1, 1, 2, 1)}
		}},
		{"tokens past the reservation", CodeProtocol, 2, 2, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, 0, rtTokens, rtTokens+1, 1)}
		}},
		// With nothing credited, seq 2 is a frame the sender could only
		// send by ignoring the agreed window, the smaller of the two.
		{"seq past decode's window", CodeProtocol, 2, 4, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, 2, 2, 3, 1)}
		}},
		{"seq past prefill's window", CodeProtocol, 4, 2, func(t *testing.T, id ID) []*Frame {
			return []*Frame{rtData(t, id, 2, 2, 3, 1)}
		}},
		// Decode refuses reversed ranges; a Receiver must not count on it:
		// both reversed make a positive cell count that covers nothing.
		{"reversed ranges", CodeProtocol, 2, 2, func(t *testing.T, id ID) []*Frame {
			f := rtWire(t, &Frame{Type: TypeData, ID: id, TokTo: 1, LayerTo: 1, Payload: make([]byte, 8*rtKVDim)})
			f.TokFrom, f.TokTo, f.LayerFrom, f.LayerTo = 2, 1, 1, 0
			return []*Frame{f}
		}},
	}
	for _, c := range cases {
		tbl, id := rtOpened(t, c.dw, c.pw)
		frames := c.frames(t, id)
		for _, f := range frames[:len(frames)-1] {
			if code, _ := rtFailCode(tbl.Step(FrameIn{Peer: rtPeer, Frame: f})); code != "" {
				t.Fatalf("%s: an acceptable frame failed the transfer: %s", c.name, code)
			}
		}
		code, wrote := rtFailCode(tbl.Step(FrameIn{Peer: rtPeer, Frame: frames[len(frames)-1]}))
		if code != c.code || wrote {
			t.Errorf("%s: failed with %q, wrote=%v; want %q and no write", c.name, code, wrote, c.code)
		}
	}
}

// TestReceiverTenantAndCount: an OPEN for another tenant, or for another
// token count, fails the reservation as Integrity before anything lands.
func TestReceiverTenantAndCount(t *testing.T) {
	for _, c := range []struct {
		tenant string
		tokens uint32
		code   string
	}{{"b", rtTokens, CodeTenant}, {"a", rtTokens - 1, CodeCount}, {"a", rtTokens + 1, CodeCount}} {
		tbl := NewTable(TableConfig{})
		id := NewID()
		if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim, Deadline: time.Minute}); err != nil {
			t.Fatal(err)
		}
		open := rtWire(t, &Frame{Type: TypeOpen, ID: id, Tenant: c.tenant, Tokens: c.tokens, Layers: rtLayers, KVDim: rtKVDim})
		if code, _ := rtFailCode(tbl.Step(FrameIn{Peer: rtPeer, Frame: open})); code != c.code {
			t.Errorf("OPEN tenant %q tokens %d: failed with %q; want %q", c.tenant, c.tokens, code, c.code)
		}
	}
}

// TestIntruderCannotDisturb: once a connection opened a transfer, frames
// for it from any other connection (another authenticated peer that
// learnt the id) are refused to that connection alone, an ABORT is not
// answered at all, and the transfer goes on.
func TestIntruderCannotDisturb(t *testing.T) {
	tbl, id := rtOpened(t, 2, 2)
	if code, _ := rtFailCode(tbl.Step(FrameIn{Peer: rtPeer, Frame: rtData(t, id, 0, 0, 1, 1)})); code != "" {
		t.Fatalf("first frame failed: %s", code)
	}
	hostile := []*Frame{
		rtWire(t, &Frame{Type: TypeOpen, ID: id, Tenant: "b", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim}),
		rtData(t, id, 0, 0, 1, 9),
		rtData(t, id, 1, 1, 2, 9),
		rtWire(t, &Frame{Type: TypeCommit, ID: id, Tokens: rtTokens, Frames: 1}),
		rtWire(t, &Frame{Type: TypeAbort, ID: id, Code: "x"}),
	}
	for _, f := range hostile {
		acts := tbl.Step(FrameIn{Peer: rtIntruder, Frame: f})
		for _, a := range acts {
			sf, ok := a.(SendFrame)
			if !ok || sf.Peer != rtIntruder || sf.Frame.Type != TypeAbort {
				t.Fatalf("intruder's %v caused %T %+v", f.Type, a, a)
			}
		}
		if want := 1; f.Type == TypeAbort {
			if len(acts) != 0 {
				t.Fatalf("intruder's ABORT answered with %v", acts)
			}
		} else if len(acts) != want {
			t.Fatalf("intruder's %v answered with %d actions; want one ABORT", f.Type, len(acts))
		}
	}
	if r := tbl.Receiver(id); r == nil || r.State() != "open" || r.covered != rtLayers {
		t.Fatalf("transfer disturbed by the intruder: %v", r)
	}
}

// TestCancelBeforeReserve: the router's cancel can reach decode before
// the RESERVE it cancels (it is sent as soon as the client goes, on
// another request). The cancelled id is remembered, so the late RESERVE
// is refused instead of holding pages until its lease runs out, and a
// sender that opens it anyway hears why.
func TestCancelBeforeReserve(t *testing.T) {
	tbl := NewTable(TableConfig{})
	id := NewID()
	acts := tbl.Step(Cancel{ID: id})
	if len(acts) != 1 {
		t.Fatalf("cancel of an unknown id: %v; want one CancelDone", acts)
	}
	if cd, ok := acts[0].(CancelDone); !ok || cd.WasReady {
		t.Fatalf("cancel of an unknown id: %+v", acts[0])
	}
	if err := tbl.Check(id); err == nil {
		t.Fatal("an id cancelled before its RESERVE may still be reserved")
	}
	res := Reservation{ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim, Deadline: time.Minute}
	if err := tbl.Reserve(res); err == nil {
		t.Fatal("RESERVE after its CANCEL accepted")
	}
	open := rtWire(t, &Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: rtKVDim})
	if got := abortsTo(tbl.Step(FrameIn{Peer: rtPeer, Frame: open}), rtPeer); len(got) != 1 || got[0].Code != CodeCancelled {
		t.Fatalf("OPEN of a cancelled id answered with %+v; want ABORT %s", got, CodeCancelled)
	}
	// The zero id names no transfer: nothing to remember.
	tbl.Step(Cancel{ID: ID{}})
	if tbl.Remembered() != 1 {
		t.Fatalf("%d ids remembered; want 1", tbl.Remembered())
	}
}

// TestSenderRefusals: decode's messages out of order fail the sender as a
// protocol error; none of them makes it Done or frees its pages early.
func TestSenderRefusals(t *testing.T) {
	// kvdim 64 at the smallest frame limit: one (token, layer) per frame.
	const kvdim = 64
	_, src := filledSeq(t, rtTokens, rtLayers, kvdim, 3)
	for _, c := range []struct {
		name  string
		hello bool
		f     func(id ID) *Frame
	}{
		{"ACK before OPEN is answered", false, func(id ID) *Frame { return &Frame{Type: TypeAck, ID: id} }},
		{"ACK before COMMIT", true, func(id ID) *Frame { return &Frame{Type: TypeAck, ID: id} }},
		{"CREDIT past the frames sent", true, func(id ID) *Frame { return &Frame{Type: TypeCredit, ID: id, Credit: 3} }},
	} {
		id := NewID()
		s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: rtTokens, Layers: rtLayers, KVDim: kvdim,
			Source: src, MaxFrameBytes: MinMaxFrameBytes, Window: 2})
		if err != nil {
			t.Fatal(err)
		}
		s.Step(Start{})
		if c.hello {
			s.Step(FrameIn{Frame: &Frame{Type: TypeHello, ID: id, Window: 2}})
		}
		var code string
		for _, a := range s.Step(FrameIn{Frame: c.f(id)}) {
			switch a := a.(type) {
			case Done:
				t.Fatalf("%s: Done", c.name)
			case Fail:
				code = a.Err.Code
			}
		}
		if code != CodeProtocol {
			t.Errorf("%s: failed with %q; want %q", c.name, code, CodeProtocol)
		}
	}
}
