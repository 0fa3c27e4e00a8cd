package decodesrv_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// otherPrefill issues and loads another prefill-role certificate from the
// pair's CA: a second prefill server of the same deployment.
func (p *pair) otherPrefill(name string) *peerauth.Auth {
	p.t.Helper()
	dir := filepath.Dir(p.peers[peerauth.RolePrefill].CA)
	cfg, err := peerauth.IssueNode(dir, dir, name, peerauth.RolePrefill, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	a, err := peerauth.Load(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	return a
}

// startWithRogue starts a pair whose decode logs to the returned buffer,
// with a second prefill of the deployment (the rogue) and the identity of
// the pair's own prefill (the one reservations name): where the tests of
// a refused sender start.
func startWithRogue(t *testing.T) (*pair, *syncBuffer, *peerauth.Auth, transfer.Identity) {
	t.Helper()
	log := new(syncBuffer)
	p := startPair(t, setup{decLog: log})
	rogue := p.otherPrefill("rogue-prefill")
	return p, log, rogue, p.prefillIdentity()
}

// kvAs opens a KV connection to decode with a's credentials.
func (p *pair) kvAs(a *peerauth.Auth) (net.Conn, transfer.Conn) {
	p.t.Helper()
	nc, err := a.Dial(context.Background(), p.kvAddr, peerauth.RoleDecode)
	if err != nil {
		p.t.Fatal(err)
	}
	c := transfer.NewTCPConn(nc, transfer.TCPOptions{})
	p.t.Cleanup(func() { c.Close() })
	return nc, c
}

// openFrame is a well-formed OPEN for a reservation of prompt by acme.
func (p *pair) openFrame(id transfer.ID, prompt []int) *transfer.Frame {
	info := p.dec.Info()
	return &transfer.Frame{Type: transfer.TypeOpen, ID: id, Tenant: "acme", Tokens: uint32(len(prompt)), Layers: uint16(info.Layers), KVDim: uint32(info.KVDim), Window: 4}
}

// reserveFrom has decode reserve a fresh id for acme's prompt, naming
// sender as the one prefill whose KV it takes, and reads the reservation:
// how each test of the sender binding begins.
func (p *pair) reserveFrom(sender transfer.Identity, prompt []int, maxTokens int) (transfer.ID, *genStream) {
	p.t.Helper()
	id := transfer.NewID()
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens,
		PrefillIdentity: sender.String()})
	if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReserved {
		p.t.Fatalf("reserve: %+v %v", ev, err)
	}
	return id, g
}

// reserveSolo encodes text, reserves it as reserveFrom does and returns
// it with what the model alone generates from it, for the tests that
// compare decode's output with that once the named prefill has sent.
func (p *pair) reserveSolo(sender transfer.Identity, text string, maxTokens int) (prompt, want []int, id transfer.ID, g *genStream) {
	p.t.Helper()
	prompt = encode(text)
	want = solo(p.t, prompt, maxTokens, peerapi.Sampling{}.Params())
	id, g = p.reserveFrom(sender, prompt, maxTokens)
	return prompt, want, id, g
}

// sendRead sends f on c and returns decode's next frame.
func sendRead(t *testing.T, nc net.Conn, c transfer.Conn, f *transfer.Frame) *transfer.Frame {
	t.Helper()
	if err := transfer.Send(c, f, transfer.DefaultMaxFrameBytes); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := c.Read()
	if err != nil {
		t.Fatalf("after %v: %v", f.Type, err)
	}
	return got
}

// TestExpectEndpoint: POST /peer/v1/expect renames the prefill a
// reservation takes its KV from, for the router alone and only while no
// prefill opened the transfer. A prefill-role certificate is refused
// (403) and changes nothing, and so is a rename to the all-zero identity,
// which names no one and would make the id a bearer key again. After the
// router's rename the prefill first named is refused (as for an unknown id)
// and the renamed one transfers the KV, which decodes exactly as the
// model alone does. Once a prefill opened a transfer, a rename is refused
// (409) and the prefill it named is refused as before.
func TestExpectEndpoint(t *testing.T) {
	p := startPair(t, setup{})
	first := p.otherPrefill("first-prefill")
	second := p.prefillIdentity() // the pair's prefill server
	firstID := transfer.Identity(first.Identity())
	prompt := encode("Lily and Tom went to the park. They saw a big dog")
	const maxTokens = 8
	want := solo(t, prompt, maxTokens, peerapi.Sampling{}.Params())
	expectURL := p.decURL + peerapi.PathExpect

	id, g := p.reserveFrom(firstID, prompt, maxTokens)
	asPrefill := p.auths[peerauth.RolePrefill].HTTPClient(peerauth.RoleDecode)
	if code, body := call(t, asPrefill, http.MethodPost, expectURL, peerapi.ExpectRequest{ID: id.String(), PrefillIdentity: second.String()}); code != http.StatusForbidden || !strings.Contains(body, "peer_role_forbidden") || !strings.Contains(body, "role prefill") {
		t.Fatalf("expect with a prefill's certificate: %d %s; want 403 peer_role_forbidden naming the prefill role", code, body)
	}
	zero := strings.Repeat("0", 64)
	if code, body := call(t, p.client, http.MethodPost, expectURL, peerapi.ExpectRequest{ID: id.String(), PrefillIdentity: zero}); code/100 != 4 || !strings.Contains(body, "all zeros") {
		t.Fatalf("expect naming the zero identity: %d %s; want a refusal saying the identity is all zeros", code, body)
	}
	// Neither moved it: the first prefill still may open it, the pair's
	// prefill may not. (first's OPEN is not sent: it would bind.)
	if code, body := call(t, p.client, http.MethodPost, expectURL, peerapi.ExpectRequest{ID: id.String(), PrefillIdentity: second.String()}); code != http.StatusOK {
		t.Fatalf("the router's expect: %d %s; want 200", code, body)
	}
	nc, c := p.kvAs(first)
	if got := sendRead(t, nc, c, p.openFrame(id, prompt)); got.Type != transfer.TypeAbort || got.Code != transfer.CodeUnknownID {
		t.Fatalf("the first-named prefill's OPEN after the rename: %+v; want ABORT %s", got, transfer.CodeUnknownID)
	}
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, DecodeKVAddr: p.kvAddr})
	if !pr.OK {
		t.Fatalf("the renamed prefill: %+v (error %+v)", pr, pr.Error)
	}
	got, last, err := g.rest()
	if err != nil || last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the rename decode ended with %+v (%+v) %v, tokens %v; want %v", last, last.Error, err, got, want)
	}

	// Opened: no rename any more.
	id2, g2 := p.reserveFrom(second, prompt, maxTokens)
	snc, sc := p.kvAs(p.auths[peerauth.RolePrefill])
	if got := sendRead(t, snc, sc, p.openFrame(id2, prompt)); got.Type != transfer.TypeHello {
		t.Fatalf("the named prefill's OPEN: %+v; want HELLO", got)
	}
	if code, body := call(t, p.client, http.MethodPost, expectURL, peerapi.ExpectRequest{ID: id2.String(), PrefillIdentity: firstID.String()}); code != http.StatusConflict || !strings.Contains(body, "already opened") {
		t.Fatalf("expect for an opened transfer: %d %s; want 409 saying the transfer was already opened", code, body)
	}
	if got := sendRead(t, nc, c, p.openFrame(id2, prompt)); got.Type != transfer.TypeAbort || got.Code != transfer.CodeUnknownID {
		t.Fatalf("another prefill's OPEN after the refused rename: %+v; want ABORT %s", got, transfer.CodeUnknownID)
	}
	if res := p.cancel(p.decURL, id2.String()); !res.Known {
		t.Fatalf("cancel: %+v", res)
	}
	g2.rest()
	sc.Close()
	c.Close()
	p.idle()
}

// TestCorruptedFrameFromAnotherPrefill: a frame that fails its checksum
// but claims, in its readable header, an unopened reservation made for
// another prefill does not cancel that reservation: decode counts and
// logs the attempt, answers the sender's connection with the usual
// connection-level ABORT and closes it, and the chosen prefill then
// transfers the KV as if nothing had come.
func TestCorruptedFrameFromAnotherPrefill(t *testing.T) {
	p, log, rogue, chosen := startWithRogue(t)
	const maxTokens = 6
	prompt, want, id, g := p.reserveSolo(chosen, "Once upon a time there was a little girl", maxTokens)
	nc, c := p.kvAs(rogue)
	b, err := p.openFrame(id, prompt).Encode(nil, transfer.DefaultMaxFrameBytes)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // the CRC: the header, and the id in it, still read
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := c.Read()
		if err != nil {
			break // decode closed the rogue's connection
		}
		if f.ID == id && f.Code != transfer.CodeUnknownID {
			t.Fatalf("decode answered the rogue's corrupted frame with %+v for the reservation", f)
		}
	}
	if v := p.metric(p.decURL, "bulkhead_kv_wrong_sender_total"); v != "1" {
		t.Errorf("decode counted %q frames from the wrong prefill, want 1", v)
	}
	if n := p.dec.Info().Load.Transfers; n != 1 {
		t.Fatalf("%d live reservations after the rogue's corrupted frame, want the one", n)
	}
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, DecodeKVAddr: p.kvAddr})
	got, last, err := g.rest()
	if !pr.OK || err != nil || last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the chosen prefill after the rogue's corrupted frame: prefill %+v (%+v), decode %+v (%+v) %v, tokens %v want %v",
			pr, pr.Error, last, last.Error, err, got, want)
	}
	if l := log.String(); !strings.Contains(l, "wrong prefill") {
		t.Errorf("decode's log does not record the refused frame:\n%s", l)
	}
	p.idle()
}

// TestWrongSenderLogIsBounded: a prefill that floods a transfer reserved
// for another with frames (ABORTs: no answer, so nothing ever fills its
// queue and closes it) costs decode a counter increment each, not a log
// line each: the lines are capped per second, and the next line written
// says how many were left out.
func TestWrongSenderLogIsBounded(t *testing.T) {
	p, log, rogue, chosen := startWithRogue(t)
	prompt := encode("Once upon a time")
	id, g := p.reserveFrom(chosen, prompt, 2)
	nc, c := p.kvAs(rogue)
	const flood = 500
	for i := range flood {
		if err := transfer.Send(c, &transfer.Frame{Type: transfer.TypeAbort, ID: id, Code: "rogue", Reason: fmt.Sprint(i)}, transfer.DefaultMaxFrameBytes); err != nil {
			t.Fatal(err)
		}
	}
	// The OPEN's answer comes after every ABORT before it was handled.
	if got := sendRead(t, nc, c, p.openFrame(id, prompt)); got.Code != transfer.CodeUnknownID {
		t.Fatalf("the rogue's OPEN: %+v; want ABORT %s", got, transfer.CodeUnknownID)
	}
	if v := p.metric(p.decURL, "bulkhead_kv_wrong_sender_total"); v != fmt.Sprint(flood+1) {
		t.Errorf("decode counted %q refused frames, want %d", v, flood+1)
	}
	if n := strings.Count(log.String(), "wrong prefill"); n == 0 || n > 50 {
		t.Errorf("decode logged %d lines for %d refused frames; want some, at most 50", n, flood+1)
	}
	if n := p.dec.Info().Load.Transfers; n != 1 {
		t.Fatalf("%d live reservations after the flood, want the one", n)
	}
	p.cancel(p.decURL, id.String())
	g.rest()
	c.Close()
	p.idle()
}
