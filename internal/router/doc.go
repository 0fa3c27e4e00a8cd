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
//   - reserve without naming the prefill it chose (over TLS): the
//     reservation carries the key that prefill's certificate presented on
//     the router's own latest connection to it, so that decode takes the
//     KV from that prefill alone; a leg moved to another prefill, or a
//     call that goes out on a connection presenting another key, is
//     renamed to decode (expect) before the request is written, and never
//     sent there if decode refuses;
//   - end a stream with a finish reason unless decode said `done`: a lost
//     decode connection is an Unavailable error, never a short success;
//   - hide the first real error: when the transfer fails, the client gets
//     the first real one (kind, code and message unchanged) after the
//     other leg was cancelled: decode's integrity verdict, else prefill's
//     own error unless it only lost its KV connection and decode knows why;
//   - succeed without decode's word: decode verifies the KV, so a request
//     goes on only after decode's `ready` or prefill's acknowledged
//     answer, and once decode said `ready` prefill's late failure (every
//     ACK lost) does not undo it;
//   - send to an address that is not in its configured peer lists, nor,
//     with peer auth, to one whose certificate names another role than
//     the list it is in (a server's Info says what it claims to be; its
//     certificate what the CA made it);
//   - send a request to a peer whose announced limits do not admit it:
//     the router admits what some live peer of each role takes (Admit;
//     Limits is the per-field bound), and pairing picks among the peers
//     that fit;
//   - send a control call twice unless a second copy is harmless
//     (replayable: PREFILL, cancel, expect; never a reservation).
package router
