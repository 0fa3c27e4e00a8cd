package transfer

import (
	"fmt"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// TestCreditSteps drives a decode Table by hand through one transfer of
// 20 single-token frames, windows 8 (decode) and 8 (prefill): CREDIT goes
// out once the credit is 4 past the last one sent; a Tick credits what
// arrived since;
// and a retransmitted DATA frame that arrives while the digest is being
// checked is ignored with its credit repeated, not taken as a protocol
// error.
func TestCreditSteps(t *testing.T) {
	const n, layers, kvdim = 20, 2, 64
	_, src := filledSeq(t, n, layers, kvdim, 11)
	lease, _ := src.Lease()
	id := NewID()
	// One token of both layers per frame (512 bytes of KV per cell).
	maxFrame := Overhead + DataHeaderSize + 2*layers*kvdim*4
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: n, Layers: layers, KVDim: kvdim, Source: lease,
		MaxFrameBytes: maxFrame, Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	tbl := NewTable(TableConfig{})
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: n, MaxNew: 1, Layers: layers, KVDim: kvdim,
		Deadline: time.Minute, Window: 8, MaxFrameBytes: maxFrame}); err != nil {
		t.Fatal(err)
	}
	dpool, _ := kv.NewPool(kv.PoolConfig{Pages: 8, PageSize: 4, Layers: layers, KVDim: kvdim})
	dst, _ := dpool.Alloc(kv.Owner{Tenant: "a", Request: 2}, n+1)

	var credits []uint32
	var digest *ComputeDigest
	ready := false
	var drive func(acts []Action)
	drive = func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case SendFrame:
				if a.Frame.Type == TypeCredit {
					credits = append(credits, a.Frame.Credit)
				}
			case WriteKV:
				drive(tbl.Step(WriteDone{ID: a.ID, Seq: a.Seq, Err: a.ApplyReadBack(dst, kvdim)}))
			case ComputeDigest:
				digest = &a
			case MarkReady:
				ready = true
			case Fail:
				t.Fatalf("decode failed: %v", a.Err)
			}
		}
	}
	wire := func(f *Frame) *Frame {
		b, err := f.Encode(nil, maxFrame)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Decode(b, maxFrame)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	var data []*Frame
	var commit *Frame
	collect := func(acts []Action) {
		for _, a := range acts {
			if sf, ok := a.(SendFrame); ok {
				switch sf.Frame.Type {
				case TypeData:
					data = append(data, wire(sf.Frame))
				case TypeCommit:
					commit = wire(sf.Frame)
				case TypeOpen:
					drive(tbl.Step(FrameIn{Peer: 1, Frame: wire(sf.Frame)}))
				}
			}
		}
	}
	collect(s.Step(Start{}))
	collect(s.Step(FrameIn{Frame: &Frame{Type: TypeHello, ID: id, Window: 8, MaxFrameBytes: uint32(maxFrame)}}))
	if len(data) != 8 {
		t.Fatalf("prefill sent %d frames into a window of 8", len(data))
	}
	for i := 0; i < 5; i++ {
		drive(tbl.Step(FrameIn{Peer: 1, Frame: data[i]}))
	}
	if len(credits) != 1 || credits[0] != 4 {
		t.Fatalf("after 5 frames decode sent credits %v; want [4]", credits)
	}
	drive(tbl.Step(Tick{Now: time.Millisecond}))
	if len(credits) != 2 || credits[1] != 5 {
		t.Fatalf("a tick after 5 frames: credits %v; want [4 5]", credits)
	}
	drive(tbl.Step(Tick{Now: 2 * time.Millisecond}))
	if len(credits) != 2 {
		t.Fatalf("a tick with nothing new sent credit again: %v", credits)
	}
	// Feed the sender the credits and decode every frame, in order.
	for next := 5; next < len(data) || commit == nil; next++ {
		collect(s.Step(FrameIn{Frame: &Frame{Type: TypeCredit, ID: id, Credit: credits[len(credits)-1]}}))
		if next < len(data) {
			drive(tbl.Step(FrameIn{Peer: 1, Frame: data[next]}))
		}
	}
	if len(data) != n {
		t.Fatalf("prefill sent %d frames for %d tokens", len(data), n)
	}
	drive(tbl.Step(FrameIn{Peer: 1, Frame: commit}))
	if digest == nil {
		t.Fatal("no ComputeDigest after every frame and the commit")
	}
	before := len(credits)
	drive(tbl.Step(FrameIn{Peer: 1, Frame: data[n-1]})) // a retransmission during verification
	if len(credits) != before+1 || credits[len(credits)-1] != n {
		t.Fatalf("duplicate DATA while verifying: credits %v", credits[before:])
	}
	sum, err := digest.Sum(dst, layers, kvdim)
	drive(tbl.Step(DigestDone{ID: id, Sum: sum, Err: err}))
	if !ready {
		t.Fatal("decode never became Ready")
	}
	// Steps of 4 from the last CREDIT sent, the tick's included; the last
	// three frames wait for a tick (or, here, the duplicate's repeat).
	if got := fmt.Sprint(credits); got != "[4 5 9 13 17 20]" {
		t.Fatalf("credits %s; want [4 5 9 13 17 20]", got)
	}
}
