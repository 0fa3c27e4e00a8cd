package transfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults("drop=0.01,dup=0.01,reorder=0.02,corrupt=0.001,truncate=0.5,delay=5ms,kill=frame:12,seed=7")
	want := FaultSpec{Drop: 0.01, Dup: 0.01, Reorder: 0.02, Corrupt: 0.001, Truncate: 0.5, Delay: 5 * time.Millisecond, KillAt: 12, Seed: 7}
	if err != nil || f != want {
		t.Fatalf("got %+v, %v", f, err)
	}
	if g, err := ParseFaults(f.String()); err != nil || g != f {
		t.Errorf("String does not round-trip: %q -> %+v, %v", f.String(), g, err)
	}
	if f, err := ParseFaults(""); err != nil || f != (FaultSpec{}) {
		t.Errorf("empty spec: %+v, %v", f, err)
	}
	for spec, msg := range map[string]string{
		"drop=2":        "outside [0, 1]",
		"drop=NaN":      "outside [0, 1]",
		"drop=x":        "not a number",
		"kill=12":       "frame:N",
		"kill=frame:0":  "at least 1",
		"explode=1":     "unknown fault",
		"drop":          "not key=value",
		"seed=-1":       "seed=-1",
		"delay=-1s":     "negative",
		"dup=0.1,dup=0": "given twice",
	} {
		if _, err := ParseFaults(spec); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseFaults(%q) = %v, want an error mentioning %q", spec, err, msg)
		}
	}
}

func TestInjectorKillAndDeterminism(t *testing.T) {
	frames := func(spec FaultSpec) string {
		in := newInjector(spec)
		var out []string
		for i := range 50 {
			emit, kill := in.apply([]byte{byte(i), 0, 0, 0})
			for _, e := range emit {
				out = append(out, fmt.Sprint(e[0]))
			}
			if kill {
				out = append(out, "kill")
				break
			}
		}
		return strings.Join(out, " ")
	}
	spec := FaultSpec{Drop: 0.2, Dup: 0.2, Reorder: 0.2, Seed: 42}
	if a, b := frames(spec), frames(spec); a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	if got := frames(FaultSpec{KillAt: 3}); got != "0 1 kill" {
		t.Errorf("kill=frame:3 wrote %q", got)
	}
}

func TestPipeFaults(t *testing.T) {
	a, b := Pipe(8, DefaultMaxFrameBytes)
	fa := WithFaults(a, FaultSpec{Corrupt: 1, Seed: 1})
	if err := Send(fa, &Frame{Type: TypeCredit, ID: ID{1}, Credit: 3}, DefaultMaxFrameBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(); err == nil {
		t.Error("a corrupted frame decoded")
	}
	ft := WithFaults(a, FaultSpec{Truncate: 1, Seed: 1})
	if err := Send(ft, &Frame{Type: TypeCredit, ID: ID{1}, Credit: 3}, DefaultMaxFrameBytes); !errors.Is(err, ErrClosed) {
		t.Errorf("truncate: write returned %v, want the connection killed", err)
	}
	if _, err := b.Read(); !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated frame read as %v", err)
	}
	if _, err := b.Read(); !errors.Is(err, ErrClosed) {
		t.Errorf("after the kill: %v", err)
	}
}

// edgeResult is what one side of the end-to-end test saw.
type edgeResult struct {
	ready, done bool
	err         error
}

// runSenderEdge is a minimal prefill edge: one goroutine reads frames, the
// caller's goroutine owns the Sender and the ticker.
func runSenderEdge(ctx context.Context, c Conn, s *Sender, release func()) edgeResult {
	in := make(chan Event, 16)
	go func() {
		for {
			f, err := c.Read()
			var ev Event
			switch {
			case err == nil:
				ev = FrameIn{Frame: f}
			case errors.As(err, new(*FrameError)):
				ev = BadFrame{Err: err}
			default:
				ev = PeerLost{Err: err}
			}
			select {
			case in <- ev:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var res edgeResult
	do := func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case SendFrame:
				if err := Send(c, a.Frame, DefaultMaxFrameBytes); err != nil {
					go func() { in <- PeerLost{Err: err} }()
				}
			case Done:
				res.done = true
			case Fail:
				res.err = a.Err
			case Release:
				release()
			}
		}
	}
	do(s.Step(Start{Now: time.Since(start)}))
	for !s.Terminal() {
		select {
		case ev := <-in:
			do(s.Step(ev))
		case <-tick.C:
			do(s.Step(Tick{Now: time.Since(start)}))
		case <-ctx.Done():
			return edgeResult{err: ctx.Err()}
		}
	}
	return res
}

// runReceiverEdge is a minimal decode edge for one connection, with
// synchronous writes into seq.
func runReceiverEdge(ctx context.Context, c Conn, tbl *Table, seq *kv.Seq, layers, kvdim int) edgeResult {
	var res edgeResult
	start := time.Now()
	frames := make(chan Event, 16)
	go func() {
		for {
			f, err := c.Read()
			var ev Event = FrameIn{Peer: 2, Frame: f}
			if err != nil {
				ev = PeerLost{Peer: 2, Err: err}
				if errors.As(err, new(*FrameError)) {
					ev = BadFrame{Peer: 2, Err: err}
				}
			}
			select {
			case frames <- ev:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var do func([]Action)
	do = func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case SendFrame:
				Send(c, a.Frame, DefaultMaxFrameBytes)
			case WriteKV:
				do(tbl.Step(WriteDone{ID: a.ID, Seq: a.Seq, Err: a.ApplyReadBack(seq, kvdim)}))
			case ComputeDigest:
				sum, err := a.Sum(seq, layers, kvdim)
				do(tbl.Step(DigestDone{ID: a.ID, Sum: sum, Err: err}))
			case MarkReady:
				res.ready = true
			case Fail:
				res.err = a.Err
			case Release:
				seq.Free()
				res.done = true
			}
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !res.ready && !res.done {
		select {
		case ev := <-frames:
			do(tbl.Step(ev))
		case <-tick.C:
			do(tbl.Step(Tick{Now: time.Since(start)}))
		case <-ctx.Done():
			return edgeResult{err: ctx.Err()}
		}
	}
	return res
}

const testLayers = 3

// TestTCPTransfer moves a real transfer over loopback TCP, with and without
// injected faults, and checks the KV that arrived.
func TestTCPTransfer(t *testing.T) {
	for _, spec := range []string{"", "dup=0.2,reorder=0.2,drop=0.1,seed=3", "corrupt=0.3,seed=5", "kill=frame:4"} {
		t.Run(spec, func(t *testing.T) { tcpTransfer(t, spec) })
	}
}

func tcpTransfer(t *testing.T, specStr string) {
	spec, err := ParseFaults(specStr)
	if err != nil {
		t.Fatal(err)
	}
	const n, kvdim = 37, 64
	cfg := kv.PoolConfig{Pages: 16, PageSize: 8, Layers: testLayers, KVDim: kvdim}
	pPool, _ := kv.NewPool(cfg)
	dPool, _ := kv.NewPool(cfg)
	src, _ := pPool.Alloc(kv.Owner{Tenant: "a", Request: 1}, n)
	for l := range testLayers {
		k, v := make([]float32, n*kvdim), make([]float32, n*kvdim)
		for i := range k {
			k[i], v[i] = float32(l*1000+i), -float32(i)
		}
		src.WriteTokens(l, 0, n, k, v)
	}
	lease, _ := src.Lease()
	src.Free()
	id := NewID()
	dst, _ := dPool.Alloc(kv.Owner{Tenant: "a", Request: 2}, n+4)
	tbl := NewTable(TableConfig{})
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: n, MaxNew: 4, Layers: testLayers, KVDim: kvdim, Deadline: 3 * time.Second, Window: 3, MaxFrameBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: n, Layers: testLayers, KVDim: kvdim, Source: lease,
		Lease: 3 * time.Second, Retry: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var dres edgeResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			dres.err = err
			return
		}
		c := NewTCPConn(nc, TCPOptions{})
		defer c.Close()
		dres = runReceiverEdge(ctx, c, tbl, dst, testLayers, kvdim)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := WithFaults(NewTCPConn(nc, TCPOptions{}), spec)
	pres := runSenderEdge(ctx, c, s, func() { lease.Release() })
	c.Close()
	wg.Wait()
	if pres.done != dres.ready {
		t.Fatalf("prefill done=%v (%v), decode ready=%v (%v)", pres.done, pres.err, dres.ready, dres.err)
	}
	if specStr == "" || strings.HasPrefix(specStr, "dup") {
		if !dres.ready {
			t.Fatalf("transfer failed: prefill %v, decode %v", pres.err, dres.err)
		}
	}
	if dres.ready {
		k, v := make([]float32, n*kvdim), make([]float32, n*kvdim)
		for l := range testLayers {
			if err := dst.ReadTokens(l, 0, n, k, v); err != nil {
				t.Fatal(err)
			}
			for i := range k {
				if k[i] != float32(l*1000+i) || v[i] != -float32(i) {
					t.Fatalf("layer %d float %d: got %v/%v", l, i, k[i], v[i])
				}
			}
		}
		dst.Free()
	} else if dres.err == nil && pres.err == nil {
		t.Fatal("failed transfer with no error on either side")
	}
	for name, p := range map[string]*kv.Pool{"prefill": pPool, "decode": dPool} {
		if st := p.Stats(); st.Free != st.Pages {
			t.Errorf("%s pool leaked: %d of %d free", name, st.Free, st.Pages)
		}
	}
}
