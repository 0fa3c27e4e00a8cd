package router

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
)

// Every ACK lost: decode verified the KV and started (`ready`), prefill
// never heard the ACK and times out. Decode's verdict stands: the client
// gets decode's tokens and finish, and decode is not cancelled. Both
// orders are covered: the timeout after `ready` (the usual one, a lease
// later), and a lost connection reported just before `ready`.
func TestEveryACKLostTakesDecodesVerdict(t *testing.T) {
	for _, c := range []struct {
		name         string
		lost         *peerapi.Error
		after, ready time.Duration
	}{
		{"timeout after ready", &peerapi.Error{Kind: "unavailable", Code: "transfer_timeout", Message: "no acknowledgement from decode within 2s"}, 300 * time.Millisecond, 0},
		{"connection lost before ready", &peerapi.Error{Kind: "unavailable", Code: "transfer_peer_lost", Message: "decode connection lost"}, 0, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			f.prefillLost, f.prefillLostAfter, f.readyDelay = c.lost, c.after, c.ready
			r, _ := f.start(t, 1, 1)
			st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
			if err != nil {
				t.Fatalf("got %v; decode verified the KV, so the request must go on", err)
			}
			toks, res := drain(t, st)
			if len(toks) != 3 || res.Err != nil || res.Finish != engine.FinishLength {
				t.Fatalf("tokens %v result %+v", toks, res)
			}
			if d := f.cancelled(RoleDecode); len(d) != 0 {
				t.Fatalf("decode was cancelled (%v) although it had verified the KV", d)
			}
			waitZero(t, &f.open)
		})
	}
}

// Without decode's `ready`, a prefill that lost its ACK is a failure:
// success needs decode's verification, never prefill's word alone.
func TestNoReadyNoSuccess(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "unavailable", Code: "transfer_timeout", Message: "no acknowledgement from decode within 2s"}
	r, _ := f.start(t, 1, 1)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Kind != errkind.Unavailable || e.Code != "transfer_timeout" {
		t.Fatalf("got %v, want prefill's timeout", err)
	}
	if d := f.cancelled(RoleDecode); len(d) != 1 {
		t.Fatalf("decode cancels %v, want its reservation cancelled", d)
	}
	waitZero(t, &f.open)
}

// A corrupted frame: decode detected it and reports an integrity failure;
// prefill reports the same failure as heard in decode's ABORT. The client
// gets decode's error (the verifier's words), Integrity (500).
func TestDecodeIntegrityBeatsPrefillsEcho(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "integrity", Code: "transfer_checksum", Message: "kv transfer aborted by decode: corrupted frame"}
	f.decodeFailsTransfer = &peerapi.Error{Kind: "integrity", Code: "transfer_checksum",
		Message: "the KV transfer for this request failed an integrity check, so nothing was generated: corrupted frame from prefill"}
	r, _ := f.start(t, 1, 1)
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Kind != errkind.Integrity || e.Message != f.decodeFailsTransfer.Message {
		t.Fatalf("got %v, want decode's integrity error", err)
	}
}

// When decode says nothing in time, prefill's integrity error stands.
func TestPrefillIntegrityErrorStandsAlone(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "integrity", Code: "transfer_checksum", Message: "kv transfer: corrupted frame from decode"}
	r, _ := f.start(t, 1, 1)
	start := time.Now()
	_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if e := errkind.Of(err); e.Kind != errkind.Integrity || !strings.Contains(e.Message, "corrupted frame from decode") {
		t.Fatalf("got %v, want prefill's integrity error", err)
	}
	if d := time.Since(start); d > causeWait+time.Second {
		t.Fatalf("took %v waiting for decode's word", d)
	}
	if d := f.cancelled(RoleDecode); len(d) != 1 {
		t.Fatalf("decode cancels %v, want its reservation cancelled", d)
	}
}

// A peer refusing the router's own peer credentials (a rotated key, a
// certificate the peer no longer trusts) is a fault of the deployment,
// not of the client's API key: never a 401, and never peerauth's words,
// which would tell the client its key was refused.
//
// The same holds for a peer that refuses the router's certificate for its
// role (403 peer_role_forbidden: the router was given another role's
// certificate): the client learns only that the server refused the
// router's credentials, not which roles the deployment's certificates
// carry.
func TestPeerRefusingRouterCredentialsIsNotTheClientsAuthError(t *testing.T) {
	for _, c := range []struct {
		role    string
		role403 bool
	}{{RoleDecode, false}, {RolePrefill, false}, {RoleDecode, true}, {RolePrefill, true}} {
		role := c.role
		name := role
		if c.role403 {
			name += "/role"
		}
		t.Run(name, func(t *testing.T) {
			f := newFake()
			r, _ := f.start(t, 1, 1)
			f.peerRoleRefused.Store(c.role403)
			f.peerAuthFails[role].Store(true) // after the handshake: the peer's credentials changed since
			_, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
			e := errkind.Of(err)
			if err == nil || e.Kind == errkind.Auth || e.Kind == errkind.BadInput || strings.Contains(e.Message, "accepts only authenticated") ||
				strings.Contains(e.Message, "presented a certificate") || e.Code != "peer_auth_failed" {
				t.Fatalf("got %+v, want a server-side failure that does not blame the client's key", e)
			}
			if e.Kind != errkind.Unavailable || !strings.Contains(e.Message, role) {
				t.Fatalf("got %+v, want Unavailable naming the %s server", e, role)
			}
			if role == RolePrefill {
				if d := f.cancelled(RoleDecode); len(d) != 1 {
					t.Fatalf("decode cancels %v, want the reservation cancelled", d)
				}
			}
			waitZero(t, &f.open)
		})
	}
}
