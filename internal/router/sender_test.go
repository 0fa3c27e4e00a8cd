package router

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// issue makes another certificate of role from the CA in dir, loaded.
func issue(t *testing.T, dir, name string, role peerauth.Role) *peerauth.Auth {
	t.Helper()
	p, err := peerauth.IssueNode(dir, dir, name, role, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := peerauth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// keyOf is the key a's certificate presents, as a reservation names its
// prefill: what the sender tests compare the router's choice with.
func keyOf(a *peerauth.Auth) string { return transfer.Identity(a.Identity()).String() }

// generateNamed is the prefill named by the i-th reservation the fake
// decode was asked for, read under the fake's lock.
func (f *fakeCluster) generateNamed(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.generates[i].PrefillIdentity
}

// TestReserveNamesTheChosenPrefill: every reservation names the prefill
// the router paired it with, by the key that prefill's certificate
// presented on the router's own connection to it, so that decode takes
// the KV from that prefill alone. When the prefill comes back with
// another certificate, the next reservation names the new key, learnt
// from the first answer on the new connection.
func TestReserveNamesTheChosenPrefill(t *testing.T) {
	dir, as := roleCertsAndCA(t)
	g := startTLSRig(t, as, Options{HealthEvery: time.Hour})
	runAll(t, g.r, []string{"acme"}, 7, 3)
	want := keyOf(as[peerauth.RolePrefill])
	if got := g.f.generateNamed(0); got != want {
		t.Fatalf("the reservation names prefill %q; the chosen prefill's key is %s", got, want)
	}

	renewed := issue(t, dir, "prefill-renewed", peerauth.RolePrefill)
	g.redeployPrefill(renewed) // the restart: the router's next call reconnects
	g.r.check(g.r.prefill[0])
	runAll(t, g.r, []string{"acme"}, 7, 3)
	want = keyOf(renewed)
	if got := g.f.generateNamed(1); got != want {
		t.Fatalf("after the prefill's new certificate the reservation names %q, want its new key %s", got, want)
	}
}

// TestMovedPrefillLegRenamesTheSender: a prefill leg moved to another
// prefill server under the same reservation (the first could not be
// reached) is first named to decode as that reservation's sender, or
// decode would refuse the new prefill's KV.
func TestMovedPrefillLegRenamesTheSender(t *testing.T) {
	dir, as := roleCertsAndCA(t)
	second := issue(t, dir, "prefill-2", peerauth.RolePrefill)
	f := newFake()
	pa0, s0, _ := tlsPeer(t, f, RolePrefill, 0, as[peerauth.RolePrefill])
	pa1, _, _ := tlsPeer(t, f, RolePrefill, 1, second)
	da, _, _ := tlsPeer(t, f, RoleDecode, 0, as[peerauth.RoleDecode])
	r, err := New(context.Background(), Options{Auth: as[peerauth.RoleRouter], Prefill: []string{pa0, pa1}, Decode: []string{da}, HealthEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s0.Close() // prefill 0: connection refused from now on
	runAll(t, r, []string{"acme", "globex", "initech"}, 7, 3)
	f.mu.Lock()
	defer f.mu.Unlock()
	want := keyOf(second)
	moved := 0
	for _, g := range f.generates {
		if g.PrefillIdentity == want {
			continue // paired with prefill 1 from the start
		}
		moved++
		found := false
		for _, e := range f.expects {
			found = found || (e.ID == g.ID && e.PrefillIdentity == want)
		}
		if !found {
			t.Fatalf("reservation %s named prefill %s and moved to prefill 1 without naming it (expects %+v)", g.ID, g.PrefillIdentity, f.expects)
		}
	}
	if moved == 0 || len(f.expects) != moved {
		t.Fatalf("%d reservations moved, %d expects sent; want at least one, one each", moved, len(f.expects))
	}
}

// TestPrefillReconnectNamesTheKeyItReached: the prefill the router names
// is the one its PREFILL call reaches, not the one its last answer came
// from. A prefill server that came back with a new certificate (a
// restart: the router's kept connection is gone) and has not answered
// since is reached on a new connection that presents the new key; the
// reservation, made from the old one, is renamed to decode (expect)
// before the call is written, or decode would refuse the KV of the very
// prefill the router chose. (TestReserveNamesTheChosenPrefill covers a
// health check between the two.)
func TestPrefillReconnectNamesTheKeyItReached(t *testing.T) {
	dir, as := roleCertsAndCA(t)
	g := startTLSRig(t, as, Options{HealthEvery: time.Hour})
	f, r := g.f, g.r
	runAll(t, r, []string{"acme"}, 7, 3)
	old := keyOf(as[peerauth.RolePrefill])
	f.mu.Lock()
	if len(f.prefillNamed) != 1 || f.prefillNamed[0] != old || len(f.expects) != 0 {
		t.Fatalf("first request: decode named %v when PREFILL came, expects %+v; want %s and none", f.prefillNamed, f.expects, old)
	}
	f.mu.Unlock()

	renewed := issue(t, dir, "prefill-renewed", peerauth.RolePrefill)
	g.redeployPrefill(renewed) // the restart, with no health check since
	runAll(t, r, []string{"acme"}, 7, 3)
	want := keyOf(renewed)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.prefillNamed) != 2 || f.prefillNamed[1] != want {
		t.Fatalf("after the prefill's new certificate decode named %v when PREFILL came; want %s (the key the call reached), not %s",
			f.prefillNamed, want, old)
	}
}

// TestUnnamedPrefillIsNotCalled: when decode will not rename the
// reservation to the key the PREFILL call's connection presents, the
// prompt is never sent there (decode would refuse its KV anyway): the
// request fails as a failure between the servers, not the prefill's
// fault, and decode's reservation is cancelled.
func TestUnnamedPrefillIsNotCalled(t *testing.T) {
	dir, as := roleCertsAndCA(t)
	g := startTLSRig(t, as, Options{HealthEvery: time.Hour, CancelGiveUp: 2 * time.Second})
	f, r := g.f, g.r
	g.redeployPrefill(issue(t, dir, "prefill-renewed", peerauth.RolePrefill))
	f.expectRefused.Store(true)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	e, ok := err.(*errkind.Error)
	if !ok || e.Kind != errkind.Unavailable || e.Code != "transfer_sender_unnamed" {
		t.Fatalf("Submit: %v; want Unavailable transfer_sender_unnamed", err)
	}
	f.mu.Lock()
	n, gen := len(f.prefills), f.generates[0].ID
	f.mu.Unlock()
	if n != 0 {
		t.Fatalf("the prompt reached the prefill %d times; decode had not taken its key", n)
	}
	if c := f.cancelled(RoleDecode); len(c) != 1 || c[0] != gen {
		t.Fatalf("decode cancels %v; want the reservation %s", c, gen)
	}
}
