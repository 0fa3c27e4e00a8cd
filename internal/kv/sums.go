package kv

import (
	"hash/crc32"
	"slices"
	"unsafe"
)

// Cell checksums (PoolConfig.Checksums).
//
// A prefill server sends every KV vector it computes to a decode server,
// and the transfer checksums each (token, layer) K and V vector with
// CRC32C on the way out. Reading the whole prompt's KV from memory for
// that at send time was a sixth of a loopback transfer, on the side that
// is already the slower one (on loopback the sender's system calls also
// run the receive path). With Checksums the pool keeps the CRC32C of every
// vector from when it was written, while it was still in cache: Seal,
// which the forward pass calls once it has filled a layer's positions of
// a step, and WriteTokens take them. The transfer combines them
// (Lease.Sums) instead of reading the pages.
//
// A checksum is only as good as the bytes it describes, so Slot, which
// lends a vector for writing, forgets the vector's checksum until the next
// Seal, and a page forgets all of its checksums when it is freed. Nothing
// downstream trusts one blindly either: decode checks the frame CRC built
// from them against the bytes that arrived, so a vector that changed
// behind the pool's back fails its transfer with an integrity error
// instead of going out under a checksum of its new bytes. The checksums
// are of the words as they lie in memory, which are the wire's
// little-endian bytes only on a little-endian machine; the transfer uses
// them only there.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// cell is the index of (page, layer, slot) in sums (twice it: K, then V)
// and in sealed.
func (p *Pool) cell(page int32, layer, slot int) int {
	return (int(page)*p.cfg.Layers+layer)*p.cfg.PageSize + slot
}

// seal checksums positions [from, to) of layer in table, which the
// caller has checked and holds mu for.
func (p *Pool) seal(table []entry, layer, from, to int) {
	sums := make([]uint32, 2*(to-from))
	p.sumRange(sums, table, layer, from, to)
	p.keepSums(sums, table, layer, from, to)
}

// sumRange sets sums[2i] and sums[2i+1] to the CRC32C of the K and V
// words of position from+i of layer, through table. It reads page memory
// only, so it needs mu only if someone could be writing those positions.
func (p *Pool) sumRange(sums []uint32, table []entry, layer, from, to int) {
	ps := p.cfg.PageSize
	for pos := from; pos < to; pos++ {
		k, v := p.span(table[pos/ps].page, layer, pos%ps, pos%ps+1)
		i := 2 * (pos - from)
		sums[i], sums[i+1] = crc32.Checksum(wordBytes(k), castagnoli), crc32.Checksum(wordBytes(v), castagnoli)
	}
}

// keepSums records sums (from sumRange) as the kept checksums of
// positions [from, to) of layer, for every page that still carries the
// tag its entry in table expects. The caller holds mu.
func (p *Pool) keepSums(sums []uint32, table []entry, layer, from, to int) {
	ps := p.cfg.PageSize
	for pos := from; pos < to; pos++ {
		e := table[pos/ps]
		if pg := &p.pages[e.page]; pg.tag != e.tag || pg.state != pageOwned {
			continue // freed under the caller: nothing to vouch for
		}
		c, i := p.cell(e.page, layer, pos%ps), 2*(pos-from)
		p.sums[2*c], p.sums[2*c+1] = sums[i], sums[i+1]
		p.sealed[c>>6] |= 1 << (c & 63)
	}
}

// unseal forgets one vector pair's checksums. The caller holds mu.
func (p *Pool) unseal(page int32, layer, slot int) {
	if p.sealed != nil {
		c := p.cell(page, layer, slot)
		p.sealed[c>>6] &^= 1 << (c & 63)
	}
}

// unsealPage forgets every checksum of page i. The caller holds mu.
func (p *Pool) unsealPage(i int32) {
	if p.sealed == nil {
		return
	}
	for c, end := p.cell(i, 0, 0), p.cell(i+1, 0, 0); c < end; c++ {
		p.sealed[c>>6] &^= 1 << (c & 63)
	}
}

// Seal implements model.KVSealer: in a pool with Checksums it takes the
// CRC32C of the K and V words of positions [from, to) of layer, which
// the forward pass has just written (through Slot). Elsewhere it does
// nothing. The positions must have been written and lie in the
// sequence's own pages.
//
// The checksums are taken without the pool's lock, which senders reading
// kept checksums and other sequences need meanwhile (a 512-token step of
// the 110M shape is 3 MB per layer): only the sequence's owner writes its
// positions, and it is the caller, so nothing changes them in between. A
// page whose tag moved on meanwhile (the sequence freed under the caller)
// gets no checksum. Seal is called by the sequence's owner only, one call
// at a time (it reuses the sequence's scratch).
func (s *Seq) Seal(layer, from, to int) error {
	p := s.pool
	if !p.cfg.Checksums {
		return nil
	}
	p.mu.Lock()
	err := s.checkLayer(layer)
	if err == nil {
		err = s.checkWritten(layer, from, to)
	}
	if err == nil {
		err = s.checkOwnRange(from, to)
	}
	s.sealTable = append(s.sealTable[:0], s.table...)
	table := s.sealTable
	p.mu.Unlock()
	if err != nil {
		return err
	}
	s.sealSums = slices.Grow(s.sealSums[:0], 2*(to-from))[:2*(to-from)]
	sums := s.sealSums
	p.sumRange(sums, table, layer, from, to)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keepSums(sums, table, layer, from, to)
	return nil
}

// Sums sets k[i] and v[i] to the CRC32C of the K and V words of position
// from+i of layer, as sealed when they were written, and reports whether
// it could: the pool keeps checksums, the lease is live and covers the
// positions, and every one of them was sealed and not lent for writing
// since. On false the caller reads the pages instead.
func (l *Lease) Sums(layer, from, to int, k, v []uint32) bool {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sealed == nil || l.released || layer < 0 || layer >= p.cfg.Layers ||
		from < 0 || from > to || to > l.tokens || len(k) < to-from || len(v) < to-from {
		return false
	}
	ps := p.cfg.PageSize
	for pos := from; pos < to; pos++ {
		e := l.pages[pos/ps]
		if pg := &p.pages[e.page]; pg.tag.gen != e.tag.gen || pg.state == pageFree {
			return false // the read that follows will meet, and count, the same
		}
		c := p.cell(e.page, layer, pos%ps)
		if p.sealed[c>>6]&(1<<(c&63)) == 0 {
			return false
		}
		k[pos-from], v[pos-from] = p.sums[2*c], p.sums[2*c+1]
	}
	return true
}

// wordBytes is the memory of f as bytes.
func wordBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}
