// Package router is the disaggregated Backend: it runs each admitted
// request on a pair of peers, a decode server that reserves KV pages and
// generates, and a prefill server that computes the prompt's KV and
// transfers it straight to that decode server.
//
// It owns the router's side of the control protocol (package peerapi):
// the handshake that refuses a mismatched deployment, health checks,
// least-loaded pairing, the order of the legs (reserve on decode, then
// prefill), error propagation, and acknowledged cancels. The KV itself
// never passes through the router.
//
// It must never:
//   - start prefill before decode said `reserved`, so no KV moves without
//     a reservation to receive it;
//   - let a client value become a transfer ID (IDs come from
//     transfer.NewID);
//   - end a stream with a finish reason unless decode said `done`: a lost
//     decode connection is an Unavailable error, never a short success;
//   - hide the first real error: when prefill fails, the client gets
//     prefill's own error (kind, code and message) after the decode
//     reservation was cancelled;
//   - send to an address that is not in its configured peer lists.
package router
