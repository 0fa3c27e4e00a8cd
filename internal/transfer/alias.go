package transfer

import (
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// DATA frames that alias prefill's KV pages.
//
// A Sender whose Source pins the pages it lends (kv.Lease: Spans and
// Live) does not copy a frame's KV into a buffer: the frame's payload is
// a list of slices of the pinned pages (Frame.vec), and the TCP transport
// hands them to writev, which copies them into the kernel before it
// returns. The rule that makes this safe, in place of "no frame aliases a
// page":
//
//  1. The pages are read only while the Source pins them. The Sender
//     takes the spans once per transfer (Lease.Spans checks every page's
//     owner tag then, before any byte of it is sent; the pin keeps the
//     tag from changing until Release), and every read of a frame's
//     bytes (Encode, TCP WriteFrame, the CRC of a frame whose CRC is not
//     known) first asks the Source whether it is still Live, and refuses
//     the frame if not: a frame sent after Release fails loudly instead
//     of sending pages that may by then be scrubbed or another tenant's.
//  2. Only Send reads a frame's bytes, synchronously: it has copied them
//     (into the kernel, or into an encoded buffer for a Pipe or a fault
//     injector, which keep only that copy) when it returns, and it drops
//     the frame's hold on the pages (Frame.release), so a second Send of
//     the same frame fails instead of reading them.
//  3. The edge carries out a Sender's actions in order, on one goroutine:
//     every SendFrame before a Release has been sent, or dropped, before
//     the Release releases the lease. The Sender emits Release only when
//     it is terminal (ACK, or failure) and never builds a frame after
//     that; a retransmission before then builds a new frame from the
//     still-pinned pages, identical to the first.
//  4. The test hook that damages a payload (Sender.corrupt) and a Source
//     that does not pin (kv.Seq, or anything without Spans and Live) get
//     the copying path: a pooled buffer per frame (bufpool.go), which the
//     frame owns outright.
//
// An edge that queued DATA frames to another goroutine and released the
// lease meanwhile would break rule 3; rule 1 then turns most such races
// into a failed Send rather than a leak, but the rule, not the check, is
// what makes it safe.

// pinner is a KV source that pins the pages it lends: Live reports that
// it still does (kv.Lease).
type pinner interface{ Live() bool }

// pinnedSource is a Source a Sender sends from in place.
type pinnedSource interface {
	kvSpanner
	pinner
}

// readable fails for a frame whose payload aliases pages that are no
// longer pinned.
func (f *Frame) readable() error {
	if f.vec != nil && f.pin != nil && !f.pin.Live() {
		return fmt.Errorf("DATA frame %d of %v: its KV pages were released before it was sent", f.Seq, f.ID)
	}
	return nil
}

// inPlace is a Sender's view of the pinned pages it sends from: spans[l]
// holds layer l's pages of positions [0, Tokens), page j covering tokens
// [j*pageTokens, (j+1)*pageTokens).
type inPlace struct {
	src        pinnedSource
	spans      [][]model.Span
	pageTokens int
}

// lend takes the spans of every layer's pages once for the transfer (the
// owner-tag check of each page happens here). ok is false when the pages
// do not have the regular shape frames are cut from (then the Sender
// copies, which works for any Source); err is a failed tag check.
func lend(src pinnedSource, tokens, layers, kvdim int) (ip *inPlace, ok bool, err error) {
	ip = &inPlace{src: src, spans: make([][]model.Span, layers)}
	for l := range layers {
		if ip.spans[l], err = src.Spans(nil, l, tokens); err != nil {
			return nil, false, fmt.Errorf("lending the prefill KV pages of layer %d: %w", l, err)
		}
	}
	pages := len(ip.spans[0])
	if pages == 0 {
		return nil, false, nil
	}
	ip.pageTokens = len(ip.spans[0][0].K) / kvdim
	if ip.pageTokens == 0 {
		return nil, false, nil
	}
	for l := range layers {
		if len(ip.spans[l]) != pages {
			return nil, false, nil
		}
		for j, sp := range ip.spans[l] {
			want := min(ip.pageTokens, tokens-j*ip.pageTokens) * kvdim
			if want <= 0 || len(sp.K) != want || len(sp.V) != want {
				return nil, false, nil
			}
		}
	}
	return ip, true, nil
}

// appendPieces appends, in DATA payload order, the slices of pages that
// hold tokens [tf, tt) of layers [lf, lt): per layer, K of every token,
// then V.
func (ip *inPlace) appendPieces(vec [][]byte, tf, tt, lf, lt, kvdim int) [][]byte {
	ps := ip.pageTokens
	for l := lf; l < lt; l++ {
		for kv := range 2 {
			for pos := tf; pos < tt; {
				j := pos / ps
				end := min(tt, (j+1)*ps)
				src := ip.spans[l][j].K
				if kv == 1 {
					src = ip.spans[l][j].V
				}
				vec = append(vec, floatBytes(src[(pos-j*ps)*kvdim:(end-j*ps)*kvdim]))
				pos = end
			}
		}
	}
	return vec
}
