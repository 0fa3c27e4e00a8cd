package transfer

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Pooled frame buffers.
//
// A transfer moves tens of megabytes as DATA frames of a few hundred KiB.
// Allocating a fresh buffer per frame costs Go a zeroing pass over every
// byte and a steady stream of garbage; recycling them costs neither. Only
// DATA buffers of at least poolMin bytes are pooled: control frames are
// tiny, and a small DATA frame is cheap to allocate.
//
// Ownership, one rule per buffer kind:
//
//   - Outgoing: when its Source does not pin pages it can lend (anything
//     but a kv.Lease), or a test damages payloads, Sender.dataFrame takes
//     the payload of every DATA frame it builds from the pool and hands
//     the frame to the edge in a SendFrame action. (From a kv.Lease it
//     takes no buffer at all: the frame aliases the pinned pages, under
//     the rule in alias.go.) The edge owns the frame from then on, and Send gives the
//     payload back once it has been written (or failed to write): a
//     SendFrame is sent once. After Send, the frame's Payload is nil, so a
//     second send fails loudly in Encode instead of reading a recycled
//     buffer.
//   - Incoming: ReadFrame (and so the TCP transport's Read) reads a large
//     DATA frame into a pooled buffer; the frame's Payload aliases it. The
//     Receiver passes the buffer on, untouched, in the WriteKV action made
//     from the frame, and WriteKV.Apply gives it back after copying the KV
//     into the sequence. From Apply on, the frame's Payload and the
//     action's Data must not be read. A frame that makes no WriteKV (a
//     duplicate, a refused or malformed one), or whose WriteKV is carried
//     out some other way, is simply garbage collected.
//
// A buffer given back twice, or an Apply after the give-back, is caught by
// a generation count: the second give-back does nothing, and Apply fails
// instead of writing a recycled buffer's bytes into a sequence.
//
// The state machines never take or give back buffers themselves; they only
// carry the reference from the frame to the action, so they stay free of
// I/O and of the pool's timing.
const (
	poolMinShift = 15 // 32 KiB: smaller DATA buffers are plain allocations
	poolMaxShift = 26 // 64 MiB: larger ones too (beyond any sane frame limit)
	poolMin      = 1 << poolMinShift
)

// frameBuf is one pooled buffer. gen advances every time it goes back to
// the pool, so a bufRef taken before that no longer matches.
type frameBuf struct {
	b     []byte // len == cap == 1<<shift
	shift int
	gen   atomic.Uint64
}

// bufRef names one lease of a frameBuf: the buffer as of generation gen.
// The zero bufRef is "not pooled".
type bufRef struct {
	fb  *frameBuf
	gen uint64
}

var bufPools [poolMaxShift + 1]sync.Pool

// getBuf returns a buffer of at least n bytes, and its reference. For n
// outside the pooled sizes the reference is zero and the buffer a plain
// allocation. Pooled buffers are not zeroed: the caller must overwrite
// all n bytes before anything reads them (ReadFrame reads the whole frame
// into them, a Sender reads a whole payload of KV).
func getBuf(n int) ([]byte, bufRef) {
	if n < poolMin || n > 1<<poolMaxShift {
		return make([]byte, n), bufRef{}
	}
	shift := bits.Len(uint(n - 1))
	fb, _ := bufPools[shift].Get().(*frameBuf)
	if fb == nil {
		fb = &frameBuf{b: make([]byte, 1<<shift), shift: shift}
	}
	// Capped at n: the bytes past it may be another transfer's (another
	// tenant's) KV, and no reslice of a payload may reach them.
	return fb.b[:n:n], bufRef{fb: fb, gen: fb.gen.Load()}
}

// live reports whether r still names the buffer it was taken as (true for
// the zero reference: a plain allocation is never recycled).
func (r bufRef) live() bool { return r.fb == nil || r.fb.gen.Load() == r.gen }

// put gives the buffer back. Only the first put of a reference counts.
func (r bufRef) put() {
	if r.fb == nil || !r.fb.gen.CompareAndSwap(r.gen, r.gen+1) {
		return
	}
	bufPools[r.fb.shift].Put(r.fb)
}
