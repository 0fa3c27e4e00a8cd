// Package decodesrv is the decode role of disaggregated serving: a
// process that reserves KV pages for a request the router announces,
// receives the prompt's KV from a prefill server over an authenticated
// stream, verifies it (through transfer.Table), and only then decodes it
// with its own engine, streaming the tokens back to the router.
//
// It owns the edge around the pure transfer state machines: sockets,
// goroutines, the clock, the pool and the engine. One goroutine (the
// loop) owns the transfer.Table and every reservation's sequence until
// the transfer is Ready; after that the engine owns it. It counts each
// tenant's requests against max_concurrent_requests from reservation on
// (tenantSlots), so a tenant at its limit is refused before prefill does
// any work for it.
//
// Who may ask for what (under mtls, by the role in the peer's
// certificate): only the router reserves, generates, cancels, moves a
// reservation to another prefill (expect), reads info and /metrics on the
// control listener (metrics name every tenant, and count what the KV
// listener refused); only prefill servers open KV streams; /health and
// /ready need nothing. Under psk every key holder is every role
// (peerauth). Each reservation is the router's that made it (the SHA-256
// of its certificate's key): only that router may cancel it or move it
// to another prefill, and any other router is answered as for an id
// decode never reserved.
//
// Each KV connection's identity (the SHA-256 of its certificate's public
// key, peerauth.ConnKeyIdentity) is taken at the handshake and passed with
// every frame; a reservation names the prefill the router chose
// (GenerateRequest.PrefillIdentity), and the Table refuses every frame
// for it from another, answering that prefill exactly as for an id it
// never reserved (transfer_unknown_id), so that a prefill learns nothing
// of reservations that are not its own. Decode alone keeps the
// distinction: it counts the refusal (kv_wrong_sender_total) and logs it,
// at a bounded rate, with both identities' prefixes (a prefill server
// logs its own, peer_key, when it starts). Under psk every key holder has
// the same identity, so this separates no prefills there.
//
// It must never decode a sequence that did not verify, never free a page
// while a write into it may still land (the Table's Release decides), never
// accept KV for an id it did not reserve, nor from a prefill other than
// the one the reservation names (not even a corrupted frame may cancel an
// unopened reservation unless its connection is that prefill's), never
// serve without peer
// authentication, never let a frame a prefill does not send (CANCEL,
// RESERVE, ...) reach the Table from a KV connection, where it would act
// as the router's, and never drop a KV stream over a corrupted frame
// without first failing its transfers as Integrity and telling prefill
// why (an ABORT), so the client gets the integrity error, not a bare
// "connection lost".
package decodesrv
