package decodesrv_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// TestShutdownDrainsReservations: a decode server told to stop (SIGTERM)
// takes no new generate request, but a request it had already reserved
// for, still waiting for its KV (its prompt being computed on prefill),
// is in flight like a decoding one: within the drain time its KV still
// arrives, verifies and is decoded, rather than the client getting a
// 502 for a server that was merely restarting. Prefill hears the ACK:
// the server's end waits for the frames it queued to be written (with
// decode's writes slowed down, the request decodes and ends long before
// its ACK is on the wire; closing the KV connections at once lost it, and
// prefill reported "decode connection lost: EOF").
func TestShutdownDrainsReservations(t *testing.T) {
	for _, faults := range []string{"", "delay=150ms,seed=1", "delay=150ms,seed=2"} {
		t.Run("faults="+faults, func(t *testing.T) {
			p := startPair(t, setup{decFaults: faults})
			prompt := encode("Once upon a time")
			want := solo(t, prompt, 8, sample.Params{})
			id := transfer.NewID().String()
			g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 8})
			if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReserved {
				t.Fatalf("reserve: %+v %v", ev, err)
			}

			p.stopDecode()
			// The shutdown is under way once the control listener refuses
			// new connections: no new request can reach the server now.
			deadline := time.Now().Add(5 * time.Second)
			for {
				c, err := net.Dial("tcp", p.decAddr)
				if err != nil {
					break
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Fatal("the decode server still accepts control connections after it was told to stop")
				}
				time.Sleep(5 * time.Millisecond)
			}

			pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 8, DecodeKVAddr: p.kvAddr})
			if !pr.OK {
				t.Fatalf("prefill of a reserved request during decode's drain: %+v", pr.Error)
			}
			toks, last, err := g.rest()
			if err != nil {
				t.Fatal(err)
			}
			if last.Type != peerapi.EventDone {
				t.Fatalf("a reserved request was dropped by decode's shutdown: %+v (%+v)", last, last.Error)
			}
			if fmt.Sprint(toks) != fmt.Sprint(want) {
				t.Fatalf("output during the drain differs from solo:\n got %v\nwant %v", toks, want)
			}
			p.idle()
		})
	}
}
