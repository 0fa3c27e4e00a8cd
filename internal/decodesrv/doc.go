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
// It must never decode a sequence that did not verify, never free a page
// while a write into it may still land (the Table's Release decides), never
// accept KV for an id it did not reserve, never serve without peer
// authentication, and never drop a KV stream over a corrupted frame
// without first failing its transfers as Integrity and telling prefill
// why (an ABORT), so the client gets the integrity error, not a bare
// "connection lost".
package decodesrv
