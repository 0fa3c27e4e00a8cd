package transfer

import (
	"encoding/hex"
)

// Identity names a prefill server the way decode can check it on a KV
// connection: the SHA-256 of the public key in the certificate its TLS
// client presented (peerauth.KeyIdentity). A transfer ID alone is a bearer
// key: any prefill that learnt one could open that reservation before the
// prefill the router chose, or fail it. So the router names its choice in
// the reservation (Reservation.Sender), the edge says who each connection
// is (FrameIn.From), and the Table refuses every frame from anyone else.
//
// The public key, not the whole certificate, because the key is what the
// TLS handshake proves the peer holds; a certificate re-issued for the same
// key names the same holder. Under psk every key holder derives the same
// key, so every prefill has the same Identity: the binding then separates
// nothing, and must not be mistaken for doing so.
//
// The zero Identity names no one: a reservation without one takes its
// OPEN from any prefill connection (a router that predates the binding),
// and only such a reservation takes frames from a connection without one.
//
// A router is named the same way (Reservation.Router): only the router
// whose certificate key made a reservation may rename its sender or
// cancel it.
type Identity [32]byte

// IsZero reports whether i names no one.
func (i Identity) IsZero() bool { return i == Identity{} }

// String is i as 64 lowercase hex digits, as ParseIdentity reads them.
func (i Identity) String() string { return hex.EncodeToString(i[:]) }

// Short is the first 16 hex digits of i, enough to tell a deployment's
// peers apart in logs and error messages; "none" for the zero Identity.
func (i Identity) Short() string {
	if i.IsZero() {
		return "none"
	}
	return hex.EncodeToString(i[:8])
}

// ParseIdentity parses 64 hex digits, as String writes them.
func ParseIdentity(s string) (Identity, error) {
	var i Identity
	if err := parseHex(i[:], s, "prefill identity"); err != nil {
		return Identity{}, err
	}
	return i, nil
}

// refuseSender answers a frame for transfer id that came from a connection
// whose identity is not the reservation's sender. The frame changes
// nothing, and the connection hears exactly what it would for an id
// decode never reserved (unknownID: same code, same message, nothing for
// an ABORT): a prefill must learn nothing about reservations that are not
// its own, not even that the id is live, or for which prefill. The edge
// alone is told who was expected and who presented itself
// (SenderRefused), so that it can count and log the attempt for the
// operator.
func refuseSender(out []Action, id ID, peer uint64, expected, presented Identity, f *Frame) []Action {
	out = unknownID(out, id, peer, f.Type)
	return append(out, SenderRefused{ID: id, Peer: peer, Type: f.Type, Expected: expected, Presented: presented})
}
