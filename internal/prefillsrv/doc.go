// Package prefillsrv is the prefill role of disaggregated serving: a
// process that admits a request against its own limits, computes the
// prompt's KV and first token with its own engine, and sends that KV to
// the decode server the router named, over an authenticated stream driven
// by a transfer.Sender. It answers the router once decode acknowledged
// the KV (or the transfer failed).
//
// It owns the edge around the pure Sender: the socket, the goroutines,
// the clock and the lease on the prefill KV. It must never send anything
// for a request its own admission rejected, never release the lease
// before the transfer is terminal (the Sender's Release decides), never
// tear a frame to cancel (a cancel is an ABORT frame, written whole),
// never serve without peer authentication, never take a control request
// from a peer whose certificate is not the router's, and never send KV to
// a server whose certificate is not a decode server's (under mtls; psk
// carries no roles). /metrics needs a peer certificate of any role;
// /health and /ready need none.
//
// A first token that ends the text (EOS) is still transferred with the
// KV: the decode server sees it and reports finish "stop" with no tokens,
// so the router needs no special case and decode stays the one source of
// the verdict.
package prefillsrv
