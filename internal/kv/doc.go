// Package kv owns the paged key/value memory of the forward pass and the
// owner tags that say whose each page is.
//
// A Pool is a fixed set of pages of PageSize tokens. One page holds, for K
// and again for V, [layer][token][kvdim] floats, so one page's run of one
// layer is a contiguous slice: that is the model.Span the attention kernel
// reads. A Seq is one request's page table of (page, expected tag) entries
// and implements model.SeqCache.
//
// The page lifecycle is a pure state machine (no goroutines, clocks or
// I/O):
//
//	free ──Alloc/Grow──▶ owned ──SharePage──▶ shared (read-only, prefix cache)
//	  ▲                    │                     │
//	  │            Free/Truncate           last hold dropped
//	  │                    ▼                     ▼
//	  └──scrub, gen++── no holders ◀── leases drain ("release pending")
//
// Every page carries a tag (tenant, request, generation); a table entry
// records the tag it expects. Slot, Spans, SpansRange, ReadTokens and
// WriteTokens check each page they touch once per call; a mismatch returns
// an error wrapping ErrOwnership, counts a violation (Stats.Violations,
// which must stay zero) and returns no data.
//
// A pool made with Checksums also keeps the CRC32C of every stored K and V
// vector from when it was written (sums.go), for a prefill server's KV
// transfer; it forgets a vector's checksum when the vector is lent for
// writing and a page's when the page is freed.
//
// What kv must never do:
//   - hand a page's floats to anyone but the sequence (or the lease taken
//     from it) whose table entry matches the page's current tag;
//   - put a page on the free list while a table, a shared reference or a
//     lease still holds it;
//   - put a page on the free list unscrubbed, unless ScrubOff was chosen
//     explicitly to measure the cost of scrubbing;
//   - let a sequence write into a shared page, or read a position that was
//     never written for it;
//   - report a kept checksum (Lease.Sums) for a vector that has been lent
//     for writing since it was sealed, or that lies in a page freed since.
//
// Concurrency: every method of Pool, Seq and Lease takes the pool's mutex,
// so Stats and Violations may be read from any goroutine. The engine is
// still expected to drive a pool from one goroutine; the slices Slot and
// Spans return belong to that goroutine until the sequence is freed or
// truncated.
package kv
