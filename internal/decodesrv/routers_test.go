package decodesrv_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// otherRouter issues and loads another router-role certificate from the
// pair's CA (a second router of the deployment, or the router back with a
// new certificate) and returns a control client that presents it.
func (p *pair) otherRouter(name string) *http.Client {
	p.t.Helper()
	dir := filepath.Dir(p.peers[peerauth.RoleRouter].CA)
	cfg, err := peerauth.IssueNode(dir, dir, name, peerauth.RoleRouter, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	a, err := peerauth.Load(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	return a.HTTPClient(peerauth.RolePrefill, peerauth.RoleDecode)
}

// asUnknown makes the same control call for id and for an id decode never
// reserved, as client, and fails the test unless both answers are the
// same status and body: what a router that does not own id may learn.
func (p *pair) asUnknown(client *http.Client, path string, body func(id string) any, id transfer.ID) (int, string) {
	p.t.Helper()
	code, got := call(p.t, client, http.MethodPost, p.decURL+path, body(id.String()))
	ucode, unknown := call(p.t, client, http.MethodPost, p.decURL+path, body(transfer.NewID().String()))
	if code != ucode || got != unknown {
		p.t.Fatalf("%s for another router's reservation: %d %s; for an unknown id: %d %s", path, code, got, ucode, unknown)
	}
	return code, got
}

// TestOnlyTheReservingRouterRenamesOrCancels: a second router certificate
// of the deployment that learnt a transfer id can neither rename the
// prefill of the reservation another router made (expect) nor cancel it,
// before the transfer or while the request decodes, and hears exactly
// what it hears for an id decode never reserved (409 no live reservation;
// known false). The reservation's router then gets its transfer and the
// model's own output, and it alone cancels its next reservation.
func TestOnlyTheReservingRouterRenamesOrCancels(t *testing.T) {
	p := startPair(t, setup{})
	other := p.otherRouter("router-2")
	chosen := p.prefillIdentity()
	const maxTokens = 24
	prompt, want, id, g := p.reserveSolo(chosen, "Lily and Tom went to the park. They saw a big dog", maxTokens)

	expect := func(id string) any {
		return peerapi.ExpectRequest{ID: id, PrefillIdentity: transfer.Identity{0x42}.String()}
	}
	cancel := func(id string) any { return peerapi.CancelRequest{ID: id} }
	if code, body := p.asUnknown(other, peerapi.PathExpect, expect, id); code != http.StatusConflict {
		t.Fatalf("another router's expect: %d %s; want 409", code, body)
	}
	if code, body := p.asUnknown(other, peerapi.PathCancel, cancel, id); code != http.StatusOK || body != "{\"known\":false}\n" {
		t.Fatalf("another router's cancel: %d %s; want known false", code, body)
	}
	if n := p.dec.Info().Load.Transfers; n != 1 {
		t.Fatalf("%d live reservations after another router's calls, want the one", n)
	}
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id.String(), Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, DecodeKVAddr: p.kvAddr})
	if !pr.OK {
		t.Fatalf("the named prefill after another router's calls: %+v (%+v)", pr, pr.Error)
	}
	if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReady {
		t.Fatalf("after the transfer decode sent %+v %v; want ready", ev, err)
	}
	// Decoding: the other router's cancel still reaches nothing.
	if code, body := p.asUnknown(other, peerapi.PathCancel, cancel, id); code != http.StatusOK || body != "{\"known\":false}\n" {
		t.Fatalf("another router's cancel while decoding: %d %s; want known false", code, body)
	}
	got, last, err := g.rest()
	if err != nil || last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the owner's request ended with %+v (%+v) %v, tokens %v; want done with %v", last, last.Error, err, got, want)
	}

	// The owner cancels its own reservation.
	id2, g2 := p.reserveFrom(chosen, prompt, maxTokens)
	if res := p.cancel(p.decURL, id2.String()); !res.Known {
		t.Fatalf("the owner's cancel: %+v; want known", res)
	}
	if _, last, _ := g2.rest(); last.Type != peerapi.EventError || last.Error == nil || last.Error.Code != transfer.CodeCancelled {
		t.Fatalf("the owner's cancelled request ended with %+v (%+v)", last, last.Error)
	}
	p.idle()
}

// TestRestartedRoutersReservationEndsByLease: a router back with a new
// certificate is another router to decode: it can no longer cancel what
// it reserved before. Such a reservation still ends, by its lease, its
// request failing with transfer_timeout and its pages freed.
func TestRestartedRoutersReservationEndsByLease(t *testing.T) {
	p := startPair(t, setup{dec: func(c *config.Config) { c.Peers.TransferTimeout = 1 }})
	restarted := p.otherRouter("router-restarted")
	id, g := p.reserveFrom(p.prefillIdentity(), encode("Once upon a time"), 4)
	if code, body := call(t, restarted, http.MethodPost, p.decURL+peerapi.PathCancel, peerapi.CancelRequest{ID: id.String()}); code != http.StatusOK || body != "{\"known\":false}\n" {
		t.Fatalf("the restarted router's cancel: %d %s; want known false", code, body)
	}
	if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error == nil || last.Error.Code != transfer.CodeTimeout {
		t.Fatalf("the old reservation ended with %+v (%+v); want %s", last, last.Error, transfer.CodeTimeout)
	}
	p.idle()
}
