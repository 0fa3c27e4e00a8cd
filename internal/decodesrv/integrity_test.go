package decodesrv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// TestCorruptFrame: a frame that fails its CRC32C makes the transfer an
// Integrity error on both sides (decode detected it; prefill hears it in
// decode's ABORT, not as a bare lost connection), and nothing leaks.
// "corrupt=1" corrupts the OPEN itself, before any stream is bound to the
// reservation; "corrupt=0.15,seed=8" corrupts a frame mid-stream.
func TestCorruptFrame(t *testing.T) {
	for _, faults := range []string{"corrupt=1,seed=3", "corrupt=0.15,seed=8"} {
		t.Run(faults, func(t *testing.T) {
			p := startPair(t, setup{preFaults: faults})
			prompt := encode("Once upon a time there was a little girl named Lily who liked to play")
			toks, last, pr := p.run(prompt, 10, peerapi.Sampling{})
			if pr.OK || pr.Error == nil || pr.Error.Kind != "integrity" || pr.Error.Code != transfer.CodeChecksum {
				t.Fatalf("prefill reported %+v (error %+v); want an integrity error", pr, pr.Error)
			}
			if last.Type != peerapi.EventError || last.Error == nil || last.Error.Kind != "integrity" || last.Error.Code != transfer.CodeChecksum ||
				!strings.Contains(last.Error.Message, "failed an integrity check") {
				t.Fatalf("decode ended with %+v (error %+v); want an integrity error that says so", last, last.Error)
			}
			if len(toks) != 0 {
				t.Fatalf("decode generated %v from a corrupted transfer", toks)
			}
			p.idle()
			if v := p.metric(p.decURL, `bulkhead_kv_transfers_failed_total{code="transfer_checksum"}`); v != "1" {
				t.Errorf("decode counted %q checksum failures, want 1", v)
			}
		})
	}
}

// kvClient opens an authenticated KV connection to decode, as prefill
// would (with prefill's credentials), for tests that write raw bytes.
func (p *pair) kvClient() transfer.Conn {
	p.t.Helper()
	nc, err := p.auths[peerauth.RolePrefill].Dial(context.Background(), p.kvAddr, peerauth.RoleDecode)
	if err != nil {
		p.t.Fatal(err)
	}
	c := transfer.NewTCPConn(nc, transfer.TCPOptions{})
	p.t.Cleanup(func() { c.Close() })
	return c
}

// openStream reserves on decode and opens the transfer on a raw KV
// connection, up to decode's HELLO.
func (p *pair) openStream(prompt []int) (*genStream, transfer.ID, transfer.Conn) {
	p.t.Helper()
	id := transfer.NewID()
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: 4})
	if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReserved {
		p.t.Fatalf("reserve: %+v %v", ev, err)
	}
	info := p.dec.Info()
	c := p.kvClient()
	open := &transfer.Frame{Type: transfer.TypeOpen, ID: id, Tenant: "acme", Tokens: uint32(len(prompt)), Layers: uint16(info.Layers), KVDim: uint32(info.KVDim)}
	if err := transfer.Send(c, open, transfer.DefaultMaxFrameBytes); err != nil {
		p.t.Fatal(err)
	}
	if f, err := c.Read(); err != nil || f.Type != transfer.TypeHello {
		p.t.Fatalf("after OPEN: %+v %v", f, err)
	}
	return g, id, c
}

// TestUnreadableFrameFailsTheBoundTransfer: a frame whose header is
// garbage names no transfer; decode still fails the transfer this
// connection opened as Integrity, writes the ABORT that says so before it
// closes the connection, and frees the reservation.
func TestUnreadableFrameFailsTheBoundTransfer(t *testing.T) {
	p := startPair(t, setup{})
	g, id, c := p.openStream(encode("Once upon a time there was"))
	if err := c.Write([]byte(strings.Repeat("not a transfer frame header! ", 4))); err != nil {
		t.Fatal(err)
	}
	f, err := c.Read()
	if err != nil || f.Type != transfer.TypeAbort || f.ID != id || f.Code != transfer.CodeChecksum {
		t.Fatalf("after a garbage frame decode sent %+v (%v); want ABORT(%s) for the open transfer", f, err, transfer.CodeChecksum)
	}
	if f, err := c.Read(); err != nil || f.Type != transfer.TypeAbort || !f.ID.IsZero() || f.Code != transfer.CodeChecksum {
		t.Fatalf("after the transfer's ABORT decode sent %+v (%v); want the connection's ABORT (zero id, %s)", f, err, transfer.CodeChecksum)
	}
	if _, err := c.Read(); err == nil {
		t.Fatal("decode kept the connection open after a frame it could not decode")
	}
	if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error.Kind != "integrity" {
		t.Fatalf("generate ended with %+v (%+v)", last, last.Error)
	}
	p.idle()
}

// TestStreamEndingInsideAFrameIsPeerLost: a prefill that dies halfway
// through writing a frame is a lost peer (502), not corruption (500).
func TestStreamEndingInsideAFrameIsPeerLost(t *testing.T) {
	p := startPair(t, setup{})
	g, id, c := p.openStream(encode("Once upon a time there was"))
	data := &transfer.Frame{Type: transfer.TypeData, ID: id, Seq: 0, TokFrom: 0, TokTo: 1, LayerFrom: 0, LayerTo: 1,
		Payload: make([]byte, 8*p.dec.Info().KVDim)}
	b, err := data.Encode(nil, transfer.DefaultMaxFrameBytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the half frame arrive before the close
	c.Close()
	if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error.Kind != "unavailable" || last.Error.Code != transfer.CodePeerLost {
		t.Fatalf("generate ended with %+v (%+v); want transfer_peer_lost", last, last.Error)
	}
	p.idle()
}

// TestOpenHitInItsHeader: an OPEN whose magic, version or type byte is
// corrupted still names its transfer, so decode fails the reservation as
// Integrity and says so in an ABORT before it closes the connection;
// prefill then reports corruption (500), not a lost connection (502).
func TestOpenHitInItsHeader(t *testing.T) {
	for _, hit := range []struct {
		name string
		at   int
	}{{"magic", 0}, {"version", 2}, {"type", 3}, {"id", 9}} {
		t.Run(hit.name, func(t *testing.T) {
			p := startPair(t, setup{})
			prompt := encode("Once upon a time there was")
			id := transfer.NewID()
			g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: 4})
			if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReserved {
				t.Fatalf("reserve: %+v %v", ev, err)
			}
			info := p.dec.Info()
			open := &transfer.Frame{Type: transfer.TypeOpen, ID: id, Tenant: "acme", Tokens: uint32(len(prompt)), Layers: uint16(info.Layers), KVDim: uint32(info.KVDim)}
			b, err := open.Encode(nil, transfer.DefaultMaxFrameBytes)
			if err != nil {
				t.Fatal(err)
			}
			b[hit.at] ^= 0x40
			c := p.kvClient()
			if err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			f, err := c.Read()
			if hit.name == "id" {
				// The OPEN names an id no reservation has: decode cannot
				// say which transfer it was, so it aborts the connection
				// (zero id), which prefill's Sender takes as its own; the
				// reservation, untouched, goes when the router cancels it.
				if err != nil || f.Type != transfer.TypeAbort || !f.ID.IsZero() || f.Code != transfer.CodeChecksum {
					t.Fatalf("after an OPEN hit in its id decode sent %+v (%v); want the connection's ABORT (zero id, %s)", f, err, transfer.CodeChecksum)
				}
				if res := p.cancel(p.decURL, id.String()); !res.Known {
					t.Fatal("the reservation was gone before the router's cancel")
				}
				g.rest()
				p.idle()
				return
			}
			if err != nil || f.Type != transfer.TypeAbort || f.ID != id || f.Code != transfer.CodeChecksum {
				t.Fatalf("after an OPEN hit in its %s decode sent %+v (%v); want ABORT(%s) for it", hit.name, f, err, transfer.CodeChecksum)
			}
			if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error.Kind != "integrity" || last.Error.Code != transfer.CodeChecksum {
				t.Fatalf("generate ended with %+v (%+v); want an integrity error", last, last.Error)
			}
			p.idle()
		})
	}
}
