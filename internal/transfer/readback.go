package transfer

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"unsafe"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// The receiver's digest, folded in as the KV lands.
//
// Digest at commit reads every page of the sequence once more, long after
// most of them left the cache. An edge that applies writes with
// WriteKV.ApplyReadBack instead keeps a CRC32C per (token, layer) cell of
// what it put in the pages, taken through the same page table and span
// arithmetic Digest uses: into a sequence that lends its memory for
// writing (Seq.WriteSpans), it checksums each vector in the pass that
// stores it there (copyIn); otherwise it reads each write's cells back
// right after writing them, while they are still in cache (Seq.SpansRange
// lends, for a range, exactly the memory Seq.Spans lends for those
// positions). Either way the checksum is of the bytes at the cell's
// location, and the location is recorded. At commit,
// ComputeDigest.Sum only combines those checksums in token order; the
// result is bit for bit the Digest of the pages.
//
// Why that still checks what is in the pages, placement included: Digest
// at commit is a function of the bytes at each cell's location at commit
// time. The fold has the bytes at each cell's location at read-back (or
// store) time.
// The two agree when no cell's bytes change between its read-back and the
// commit, and Sum checks the conditions for that before it uses the fold:
//   - exactly once: every cell of the committed tokens was read back, and
//     none twice (the Receiver issues one WriteKV per cell, and the fold
//     counts them itself, so an edge that applied a write twice falls back
//     to the full digest);
//   - same place: each cell was read back from the K and V addresses
//     Seq.Spans gives for it at commit (recorded per cell, compared at
//     Sum), so a page table that changed in between is noticed;
//   - no sharing: the spans Seq.Spans gives at commit, K and V of every
//     (layer, page), are pairwise disjoint, so no cell's location is
//     another cell's: a later write to its own cells cannot have changed
//     a cell already read back. (kv hands out spans capped at their
//     range, so a write through WriteTokens reaches no other memory.)
//
// Nothing else writes the sequence during a transfer: decode reserved it
// for this transfer alone and the engine takes it only at MarkReady. So a
// misplaced write (token t's KV at t' or in another layer) leaves t's own
// location holding something else when t is read back, and the sum
// differs exactly as Digest's would. TestReadBackCatchesMisplacedWrite
// shows it. When any condition fails, Sum computes Digest over the pages
// instead: never a weaker check, only a slower one.

// rangeWriter lends the pages of positions [from, to) of a layer for
// writing (kv.Seq).
type rangeWriter interface {
	WriteSpans(dst []model.Span, layer, from, to int) ([]model.Span, error)
}

// rangeSpanner lends the pages of written positions [from, to) of a
// layer in place (kv.Seq).
type rangeSpanner interface {
	SpansRange(dst []model.Span, layer, from, to int) ([]model.Span, error)
}

// readBack is one transfer's folded digest. The Receiver makes it and
// only carries it, from WriteKV to WriteKV and on to ComputeDigest; the
// edge fills it in ApplyReadBack and finishes it in Sum.
type readBack struct {
	mu            sync.Mutex
	tokens        int
	layers, kvdim int
	src           any            // the sequence written and read back
	cells         []uint32       // CRC32C of cell t*layers+l's K‖V, as read back
	addrK, addrV  []uintptr      // where each cell was read back from
	seen          []bool         // cells read back
	n             int            // len(seen) that are true
	broken        bool           // the fold cannot stand for Digest: Sum recomputes
	spans         []model.Span   // scratch
	crcK, crcV    []uint32       // scratch: a span's vector checksums
	vec           *crcCombiner   // combines vectors of 4*kvdim bytes
	comb          *crcCombiner   // combines cells of 8*kvdim bytes
	regions       [][2]uintptr   // scratch for the disjointness check
	commitSpans   [][]model.Span // scratch for Sum
}

func newReadBack(tokens, layers, kvdim int) *readBack {
	return &readBack{tokens: tokens, layers: layers, kvdim: kvdim}
}

// ApplyReadBack is Apply followed by the read-back: the cells just
// written are read back from dst's pages and checksummed into the
// transfer's digest, which ComputeDigest.Sum then finishes without
// reading the sequence again. An edge that uses it should answer
// ComputeDigest with Sum; Sum falls back to the full Digest when any
// write was applied some other way. Writes of one transfer may run on
// different goroutines; they take turns on the fold.
func (w WriteKV) ApplyReadBack(dst KVWriter, kvdim int) error {
	rs, ok := dst.(rangeSpanner)
	if w.rb == nil || !ok || !w.rb.start(dst, w, kvdim) {
		return w.Apply(dst, kvdim)
	}
	if ws, ok := dst.(rangeWriter); ok {
		return w.applyThrough(ws, kvdim)
	}
	// Each layer is read back right after it is written: a frame's
	// layers together may not fit in cache, one layer's tokens do.
	return w.apply(dst, kvdim, func(l int) error {
		w.rb.mu.Lock()
		defer w.rb.mu.Unlock()
		return w.rb.fold(rs, w, l)
	})
}

// applyThrough is ApplyReadBack for a sequence that lends its memory
// for writing: each layer is copied in and checksummed in one pass
// (copyIn).
func (w WriteKV) applyThrough(ws rangeWriter, kvdim int) error {
	return w.each(kvdim, func(l int, k, v []float32) error {
		w.rb.mu.Lock()
		defer w.rb.mu.Unlock()
		return w.rb.copyIn(ws, w, l, k, v)
	})
}

// start checks that w can be folded in, reading back from dst: false
// (and the fold is broken for good, so Sum recomputes) when it cannot.
func (rb *readBack) start(dst KVWriter, w WriteKV, kvdim int) bool {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	switch {
	case rb.broken:
		return false
	case !nativeLittleEndian || kvdim != rb.kvdim || !identifiable(dst) ||
		w.TokFrom < 0 || w.TokTo > rb.tokens || w.LayerFrom < 0 || w.LayerTo > rb.layers:
		rb.broken = true
		return false
	case rb.src == nil:
		rb.src = dst
		n := rb.tokens * rb.layers
		rb.cells, rb.addrK, rb.addrV, rb.seen = make([]uint32, n), make([]uintptr, n), make([]uintptr, n), make([]bool, n)
	case rb.src != any(dst):
		rb.broken = true
		return false
	}
	return true
}

// fold reads back layer l of w's cells through rs. The caller holds mu.
func (rb *readBack) fold(rs rangeSpanner, w WriteKV, l int) error {
	if rb.broken {
		return nil
	}
	kd := rb.kvdim
	spans, err := rs.SpansRange(rb.spans[:0], l, w.TokFrom, w.TokTo)
	rb.spans = spans
	if err != nil {
		return fmt.Errorf("transfer write %d: reading back layer %d tokens [%d, %d): %w", w.Seq, l, w.TokFrom, w.TokTo, err)
	}
	t := w.TokFrom
	for _, sp := range spans {
		m := min(len(sp.K)/kd, w.TokTo-t)
		crcK, crcV := rb.scratch(m)
		crcVecs(crcK, floatBytes(sp.K[:m*kd]), 4*kd)
		crcVecs(crcV, floatBytes(sp.V[:m*kd]), 4*kd)
		rb.record(sp, t, l, crcK, crcV)
		t += m
	}
	if t != w.TokTo {
		rb.broken = true
	}
	return nil
}

// copyIn is the write and the read-back in one pass: it takes the
// memory of layer l's positions [w.TokFrom, w.TokTo) from ws and copies
// k and v ([token][kvdim] each) into it with copyVecs, which checksums
// each vector as it stores it, bypassing the cache, and folds those
// checksums in as fold would have read them back. The bytes a vector's
// checksum is taken over are the ones the same instructions store at
// the address recorded for it, so Sum's conditions (exactly once, same
// place, no sharing) carry over unchanged. What it no longer checks is
// the copy itself: a kernel that stored a word somewhere other than where
// it was told would leave the fold describing bytes the pages do not
// hold, which a read-back would have caught; TestCopyVecs checks
// copyVecs, stores and all, against copy and hash/crc32. The caller holds
// mu.
func (rb *readBack) copyIn(ws rangeWriter, w WriteKV, l int, k, v []float32) error {
	kd := rb.kvdim
	spans, err := ws.WriteSpans(rb.spans[:0], l, w.TokFrom, w.TokTo)
	rb.spans = spans
	if err != nil {
		return err
	}
	t, off := w.TokFrom, 0
	for _, sp := range spans {
		m := len(sp.K) / kd
		if off+m > len(k)/kd || len(sp.V) != len(sp.K) {
			return fmt.Errorf("lent %d positions for %d", off+m, len(k)/kd)
		}
		crcK, crcV := rb.scratch(m)
		copyVecs(floatBytes(sp.K), crcK, floatBytes(k[off*kd:(off+m)*kd]), 4*kd)
		copyVecs(floatBytes(sp.V), crcV, floatBytes(v[off*kd:(off+m)*kd]), 4*kd)
		if !rb.broken {
			rb.record(sp, t, l, crcK, crcV)
		}
		t, off = t+m, off+m
	}
	if t != w.TokTo {
		return fmt.Errorf("lent %d positions for %d", t-w.TokFrom, w.TokTo-w.TokFrom)
	}
	return nil
}

// scratch returns room for the checksums of m K and m V vectors.
func (rb *readBack) scratch(m int) (k, v []uint32) {
	if cap(rb.crcK) < m {
		rb.crcK, rb.crcV = make([]uint32, m), make([]uint32, m)
	}
	return rb.crcK[:m], rb.crcV[:m]
}

// record folds in the checksums of cells (t..t+len(crcK)-1, l), whose K
// and V lie at the start of sp, and where they were. A cell seen twice
// breaks the fold: exactly-once is not the fold's to assume. The caller
// holds mu.
func (rb *readBack) record(sp model.Span, t, l int, crcK, crcV []uint32) {
	kd, L := rb.kvdim, rb.layers
	if rb.vec == nil {
		rb.vec = combinerFor(4 * kd)
	}
	for i := range crcK {
		c := (t+i)*L + l
		if rb.seen[c] {
			rb.broken = true
			return
		}
		rb.cells[c] = rb.vec.combine(crcK[i], crcV[i]) // the CRC of K‖V
		rb.addrK[c], rb.addrV[c] = addr(floatBytes(sp.K[i*kd:])), addr(floatBytes(sp.V[i*kd:]))
		rb.seen[c] = true
		rb.n++
	}
}

// Sum answers c: the Digest of tokens [0, c.Tokens) of r. When every
// write of the transfer was applied with ApplyReadBack to r, and the
// conditions in the comment at the top of readback.go hold, it combines
// the checksums read back; otherwise it computes Digest(r, ...).
func (c ComputeDigest) Sum(r KVReader, layers, kvdim int) ([32]byte, error) {
	if c.rb != nil {
		if sum, ok := c.rb.finish(r, c.Tokens, layers, kvdim); ok {
			return sum, nil
		}
	}
	return Digest(r, c.Tokens, layers, kvdim)
}

// finish checks the fold against r's pages as they are now and, if it
// stands for them, returns the digest.
func (rb *readBack) finish(r KVReader, n, layers, kvdim int) ([32]byte, bool) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	sp, ok := r.(kvSpanner)
	if rb.broken || !ok || rb.src == nil || !identifiable(r) || rb.src != any(r) ||
		n != rb.tokens || layers != rb.layers || kvdim != rb.kvdim || rb.n != n*layers {
		return [32]byte{}, false
	}
	// Same place: every cell's location at commit is the one it was read
	// back from. No sharing: those locations are pairwise disjoint.
	rb.regions = rb.regions[:0]
	if len(rb.commitSpans) < layers {
		rb.commitSpans = make([][]model.Span, layers)
	}
	for l := range layers {
		spans, err := sp.Spans(rb.commitSpans[l][:0], l, n)
		rb.commitSpans[l] = spans
		if err != nil {
			return [32]byte{}, false // Digest will meet, and report, the same error
		}
		t := 0
		for _, s := range spans {
			for i := 0; i < len(s.K)/kvdim; i, t = i+1, t+1 {
				if t >= n || rb.addrK[t*layers+l] != addr(floatBytes(s.K[i*kvdim:])) || rb.addrV[t*layers+l] != addr(floatBytes(s.V[i*kvdim:])) {
					return [32]byte{}, false
				}
			}
			if len(s.K) > 0 {
				rb.regions = append(rb.regions, region(s.K), region(s.V))
			}
		}
		if t != n {
			return [32]byte{}, false
		}
	}
	slices.SortFunc(rb.regions, func(a, b [2]uintptr) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	for i := 1; i < len(rb.regions); i++ {
		if rb.regions[i][0] < rb.regions[i-1][1] {
			return [32]byte{}, false
		}
	}
	return rb.combined(), true
}

// combined is the digest of the cells as read back: each token's cells
// combined in layer order into the checksum Digest computes for it. The
// caller holds mu and has checked that every cell was read back.
func (rb *readBack) combined() [32]byte {
	if rb.comb == nil {
		rb.comb = combinerFor(8 * rb.kvdim)
	}
	L := rb.layers
	sums := make([]byte, 4*rb.tokens)
	for t := range rb.tokens {
		var crc uint32
		for _, cell := range rb.cells[t*L : (t+1)*L] {
			crc = rb.comb.combine(crc, cell)
		}
		binary.LittleEndian.PutUint32(sums[4*t:], crc)
	}
	return digestOf(rb.tokens, L, rb.kvdim, sums)
}

// addr is where b starts, as a number: compared, never dereferenced.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// region is the address range a span's slice covers.
func region(f []float32) [2]uintptr {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	return [2]uintptr{a, a + 4*uintptr(len(f))}
}

// identifiable reports whether x can be compared with == without a
// panic (the fold compares the sequences it is given by identity).
func identifiable(x any) bool { return x != nil && reflect.TypeOf(x).Comparable() }
