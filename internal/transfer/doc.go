// Package transfer moves a request's prompt KV from a prefill server to a
// decode server: the wire format, the protocol as pure state machines, and
// the transports and fault injection at the edge. The protocol is written
// down in docs/transfer-protocol.md.
//
// It owns:
//   - the frame format (frame.go): magic, version, type, 128-bit transfer
//     id, length-prefixed body, CRC32C; Decode and ReadFrame refuse
//     oversize frames before allocating;
//   - Sender (prefill side, one per transfer), Receiver and Table (decode
//     side): raft-style machines, Step(Event) []Action, with no goroutines,
//     sockets or clocks; time arrives as Tick(now);
//   - Digest, the placement-independent SHA-256 of KV in token order;
//   - Conn transports (in-memory Pipe, TCP) and WithFaults/ParseFaults;
//   - the pool of DATA frame buffers (bufpool.go): a received payload goes
//     back when WriteKV.Apply has copied it into the sequence, a copied
//     outgoing one when Send has written it. The machines only carry the
//     reference from frame to action; they never take or give back one;
//   - the rule under which a Sender's DATA frame aliases the pinned pages
//     of a kv.Lease instead of a copy (alias.go), and the read-back that
//     folds the receiver's digest as the KV lands (readback.go).
//
// KV is moved as the cache stores it, in 4-byte words: "kvdim" throughout
// counts words per token per layer (kv.PoolConfig.RowWords), so an f32
// and an f16 cache differ only in how many there are. Nothing here ever
// reads the numbers.
//
// The hot path reads every byte of KV as few times as the checks allow.
// Prefill: the Sender checksums each K and V vector of a frame once, in
// the pinned pages, and combines the checksums into both the frame's CRC
// and the digest (crc.go); the TCP transport writes head, page slices and
// CRC with one writev, the only copy. Decode: the transport reads a body
// into a pooled buffer in cache-sized pieces, checksumming each as it
// arrives; ApplyReadBack copies each layer into the pages and reads it
// straight back for the digest, so COMMIT only combines checksums.
//
// It must never:
//   - let a decode sequence become Ready unless every (token, layer) of the
//     reserved count arrived exactly once, every frame passed its CRC, the
//     digest of the KV as written matches the sender's, and the tenant and
//     count match the reservation;
//   - ask for a receiver's pages to be released while a write or digest it
//     asked for is unconfirmed, or a sender's before ACK or failure;
//   - accept frames for an id it did not reserve, or reserve an id twice;
//   - let a frame from a connection that presents another Identity than
//     the reservation's Sender (the prefill the router chose) change the
//     transfer in any state: a transfer id is otherwise a bearer key that
//     any prefill who learnt it could open or fail. The edge supplies each
//     connection's Identity (FrameIn.From); under psk all are the same;
//   - send a shorter stand-in for a prompt over the sender's limit (the
//     build tag bulkhead_placeholder re-introduces exactly that bug so the
//     tests can show they catch it);
//   - allocate or free KV pages itself: the edge does, on Release and
//     MarkReady, through package kv.
package transfer
