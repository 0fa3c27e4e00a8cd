package decodesrv_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// prefillIdentity is the identity of the pair's prefill server as the
// router learns it: from its own TLS connection to prefill's control
// endpoint.
func (p *pair) prefillIdentity() transfer.Identity {
	p.t.Helper()
	resp, err := p.client.Get(p.preURL + peerapi.PathInfo)
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	id, ok := peerauth.KeyIdentity(resp.TLS)
	if !ok {
		p.t.Fatal("the control connection to prefill carries no certificate")
	}
	return id
}

// TestOnlyTheChosenPrefillOpensTheTransfer: a second prefill server of the
// deployment (its own prefill-role certificate from the same CA) that
// learnt a transfer's id cannot take over or fail the reservation the
// router made for another prefill, nor tell it from an id decode never
// reserved: its OPEN (every field right) and its COMMIT are answered on
// its connection with exactly the ABORT the same frame gets under an
// unknown id (transfer_unknown_id, the same words, naming no prefill),
// its ABORT with nothing, and the connection stays open in both cases.
// Decode alone counts each refusal and logs both prefills (wrong
// prefill); the reservation stays live and unopened, and the chosen
// prefill then transfers the KV and decode generates exactly what the
// model alone does.
func TestOnlyTheChosenPrefillOpensTheTransfer(t *testing.T) {
	p, log, rogue, chosen := startWithRogue(t)
	const maxTokens = 12
	prompt, want, id, g := p.reserveSolo(chosen, "Lily and Tom went to the park. They saw a big dog", maxTokens)

	nc, c := p.kvAs(rogue)
	open := p.openFrame(id, prompt)
	for _, f := range []*transfer.Frame{
		{Type: transfer.TypeAbort, ID: id, Code: "rogue", Reason: "a rogue's abort"},
		open,
		{Type: transfer.TypeCommit, ID: id, Tokens: uint32(len(prompt)), Frames: 1},
	} {
		if err := transfer.Send(c, f, transfer.DefaultMaxFrameBytes); err != nil {
			t.Fatal(err)
		}
		if f.Type == transfer.TypeAbort {
			continue // never answered; the OPEN's ABORT below comes first if this one was
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := c.Read()
		if err != nil || got.Type != transfer.TypeAbort || got.ID != id {
			t.Fatalf("after the rogue's %v decode sent %+v (%v); want an ABORT", f.Type, got, err)
		}
		unknown := *f
		unknown.ID = transfer.NewID()
		want := sendRead(t, nc, c, &unknown)
		if got.Kind != want.Kind || got.Code != want.Code || got.Reason != want.Reason || got.Code != transfer.CodeUnknownID {
			t.Fatalf("the rogue's %v was answered %v %q %q; under an unknown id %v %q %q: a prefill can tell another's reservation from no reservation",
				f.Type, got.Kind, got.Code, got.Reason, want.Kind, want.Code, want.Reason)
		}
	}
	if n := p.dec.Info().Load.Transfers; n != 1 {
		t.Fatalf("%d live reservations after the rogue's frames, want the one, unopened", n)
	}
	if v := p.metric(p.decURL, "bulkhead_kv_wrong_sender_total"); v != "3" {
		t.Errorf("decode counted %q frames from the wrong prefill, want 3", v)
	}

	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, DecodeKVAddr: p.kvAddr})
	if !pr.OK || pr.FirstToken != want[0] {
		t.Fatalf("the chosen prefill after the rogue: %+v (error %+v); want OK with first token %d", pr, pr.Error, want[0])
	}
	got, last, err := g.rest()
	if err != nil || last.Type != peerapi.EventDone {
		t.Fatalf("generate ended with %+v (error %+v) %v", last, last.Error, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("output after the rogue's attempt differs from solo:\n got %v\nwant %v", got, want)
	}
	if l := log.String(); !strings.Contains(l, "wrong prefill") || !strings.Contains(l, chosen.Short()) ||
		!strings.Contains(l, transfer.Identity(rogue.Identity()).Short()) {
		t.Errorf("decode's log does not name the refused sender and the expected one:\n%s", l)
	}
	c.Close()
	p.idle()
}

// TestChosenPrefillUnderPSK: under psk every prefill presents the one key
// the pre-shared key derives, so the binding tells none apart, but it
// must not lock the deployment out: a reservation naming the prefill's
// identity as the router sees it is opened by that prefill.
func TestChosenPrefillUnderPSK(t *testing.T) {
	p := startPair(t, setup{psk: true})
	chosen := p.prefillIdentity()
	prompt, want, id, g := p.reserveSolo(chosen, "Once upon a time there was", 6)
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: 6, DecodeKVAddr: p.kvAddr})
	got, last, _ := g.rest()
	if !pr.OK || last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("psk transfer to the named prefill: prefill %+v (%+v), decode %+v (%+v), tokens %v want %v", pr, pr.Error, last, last.Error, got, want)
	}
	p.idle()
}

// TestGenerateRefusesMalformedPrefillIdentity: a reservation that names
// its sender in a form decode cannot read is refused before anything is
// reserved, rather than taken as naming no one.
func TestGenerateRefusesMalformedPrefillIdentity(t *testing.T) {
	p := startPair(t, setup{})
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: encode("Once"), MaxTokens: 2,
		PrefillIdentity: "not-hex"})
	if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error == nil || last.Error.Kind != "bad_input" {
		t.Fatalf("generate with a malformed prefill identity ended with %+v (%+v); want a bad_input error", last, last.Error)
	}
	if n := p.dec.Info().Load.Transfers; n != 0 {
		t.Fatalf("%d reservations left", n)
	}
}
