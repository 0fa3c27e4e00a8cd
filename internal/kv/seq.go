package kv

import (
	"fmt"
	"slices"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// entry is one page-table slot: the page and the tag it must carry. For an
// owned page the tag is the sequence's own; for a shared page it is the
// tag of the prefix-cache entry the page was attached from.
type entry struct {
	page   int32
	shared bool
	tag    tag
}

// Seq is one sequence's page table. It implements model.SeqCache: the
// forward pass writes through Slot and reads through Spans, and every read
// or write checks the owner tag of each page it touches, once per page.
//
// Positions become readable only once written (through Slot or
// WriteTokens, or by attaching a cached prefix), and only as a contiguous
// run from 0 per layer: Spans(layer, n) with n beyond that run fails
// rather than returning whatever a page held before. This is the guard
// against attending over positions that never arrived.
type Seq struct {
	pool   *Pool
	owner  Owner
	tenant uint32
	table  []entry
	freed  bool
	// filled[layer] is the length of the contiguous written run from 0;
	// written[layer] is a bitmap of written positions beyond it.
	filled  []int
	written [][]uint64
	// sealTable and sealSums are Seal's scratch, reused so that a
	// prefill's forward pass does not allocate per layer.
	sealTable []entry
	sealSums  []uint32
}

var _ model.SeqCache = (*Seq)(nil)

// Alloc reserves ceil(tokens/PageSize) pages for a new sequence of owner,
// all or nothing. It fails with a *PoolFullError or *QuotaError.
func (p *Pool) Alloc(owner Owner, tokens int) (*Seq, error) {
	return p.AllocWithPrefix(owner, nil, tokens)
}

// AllocWithPrefix starts a sequence whose first len(prefix) pages are the
// given shared prefix pages (read-only, already filled) and reserves own
// pages for the rest of tokens, all or nothing. Every ref must still name
// a live shared page at the generation it was shared at; a stale one fails
// with ErrOwnership. The new sequence takes its own hold on each prefix
// page, so the caller's references are untouched.
func (p *Pool) AllocWithPrefix(owner Owner, prefix []PageRef, tokens int) (*Seq, error) {
	if tokens < 0 {
		return nil, fmt.Errorf("%w: allocation of %d tokens", ErrRange, tokens)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range prefix {
		if err := p.checkRef(r); err != nil {
			return nil, err
		}
	}
	s := &Seq{pool: p, owner: owner, tenant: p.intern(owner.Tenant)}
	s.filled = make([]int, p.cfg.Layers)
	s.written = make([][]uint64, p.cfg.Layers)
	need := p.pagesFor(tokens) - len(prefix)
	if need < 0 {
		need = 0
	}
	own, err := p.reserve(s.tenant, need)
	if err != nil {
		return nil, err
	}
	s.table = make([]entry, 0, len(prefix)+need)
	for _, r := range prefix {
		p.pages[r.page].holders++
		s.table = append(s.table, entry{page: r.page, shared: true, tag: r.tag})
	}
	p.holdGen++
	s.adopt(own)
	for l := range s.filled {
		s.filled[l] = len(prefix) * p.cfg.PageSize
	}
	s.resizeBits()
	return s, nil
}

// pagesFor is ceil(tokens/PageSize) for tokens >= 0, written so that a
// count near the top of int cannot wrap to a negative number of pages
// (which would "fit" in any pool).
func (p *Pool) pagesFor(tokens int) int {
	n := tokens / p.cfg.PageSize
	if tokens%p.cfg.PageSize != 0 {
		n++
	}
	return n
}

// adopt appends freshly reserved pages to the table, tagged as s's.
func (s *Seq) adopt(pages []int32) {
	for _, i := range pages {
		pg := &s.pool.pages[i]
		pg.tag.request = s.owner.Request
		s.table = append(s.table, entry{page: i, tag: pg.tag})
	}
}

// resizeBits sizes the written bitmaps to the capacity.
func (s *Seq) resizeBits() {
	words := (len(s.table)*s.pool.cfg.PageSize + 63) / 64
	for l := range s.written {
		if len(s.written[l]) < words {
			s.written[l] = append(s.written[l], make([]uint64, words-len(s.written[l]))...)
		}
	}
}

// Owner returns the owner the sequence was allocated for.
func (s *Seq) Owner() Owner { return s.owner }

// Grow ensures capacity for tokens positions, all or nothing. A negative
// count fails with ErrRange.
func (s *Seq) Grow(tokens int) error {
	if tokens < 0 {
		return fmt.Errorf("%w: growth to %d tokens", ErrRange, tokens)
	}
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return ErrFreed
	}
	need := p.pagesFor(tokens) - len(s.table)
	if need <= 0 {
		return nil
	}
	own, err := p.reserve(s.tenant, need)
	if err != nil {
		return err
	}
	s.adopt(own)
	s.resizeBits()
	return nil
}

// Len is the number of positions written in every layer, contiguously from 0.
func (s *Seq) Len() int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return s.lenLocked()
}

func (s *Seq) lenLocked() int {
	if s.freed {
		return 0
	}
	n := -1
	for _, f := range s.filled {
		if n < 0 || f < n {
			n = f
		}
	}
	return max(n, 0)
}

// Cap is the number of positions the page table covers.
func (s *Seq) Cap() int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.table) * s.pool.cfg.PageSize
}

// Pages is the number of pages in the table, shared prefix pages included.
func (s *Seq) Pages() int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.table)
}

func (s *Seq) checkLayer(layer int) error {
	if s.freed {
		return ErrFreed
	}
	if layer < 0 || layer >= s.pool.cfg.Layers {
		return fmt.Errorf("%w: layer %d of %d", ErrRange, layer, s.pool.cfg.Layers)
	}
	return nil
}

// markWritten records positions [from, to) of layer as written.
func (s *Seq) markWritten(layer, from, to int) {
	bits := s.written[layer]
	for pos := max(from, s.filled[layer]); pos < to; pos++ {
		bits[pos>>6] |= 1 << (pos & 63)
	}
	f := s.filled[layer]
	for f < len(bits)*64 && bits[f>>6]&(1<<(f&63)) != 0 {
		f++
	}
	s.filled[layer] = f
}

// KVType implements model.SeqCache.
func (s *Seq) KVType() model.KVType { return s.pool.cfg.Type }

// Slot implements model.SeqCache: it returns the storage for position pos
// of layer and marks it written. It fails on a shared page (ErrReadOnly)
// and on a page whose tag does not match (ErrOwnership).
func (s *Seq) Slot(layer, pos int) (k, v []float32, err error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return nil, nil, err
	}
	if pos < 0 || pos >= len(s.table)*p.cfg.PageSize {
		return nil, nil, fmt.Errorf("%w: position %d, capacity %d", ErrRange, pos, len(s.table)*p.cfg.PageSize)
	}
	e := s.table[pos/p.cfg.PageSize]
	if err := p.check(e); err != nil {
		return nil, nil, err
	}
	if e.shared {
		return nil, nil, fmt.Errorf("%w: position %d lies in shared prefix page %d", ErrReadOnly, pos, e.page)
	}
	s.markWritten(layer, pos, pos+1)
	off := pos % p.cfg.PageSize
	p.unseal(e.page, layer, off) // until Seal: the caller is about to write it
	k, v = p.span(e.page, layer, off, off+1)
	return k, v, nil
}

// Spans implements model.SeqCache: it appends one Span per page covering
// positions [0, n) of layer. Each page's tag is checked once; on a mismatch
// it returns dst unextended and an error wrapping ErrOwnership, and counts
// a violation. n must not exceed the written run of the layer.
func (s *Seq) Spans(dst []model.Span, layer, n int) ([]model.Span, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return dst, err
	}
	if n < 0 || n > s.filled[layer] {
		return dst, fmt.Errorf("%w: %d positions of layer %d requested, %d written", ErrRange, n, layer, s.filled[layer])
	}
	ps := p.cfg.PageSize
	pages := (n + ps - 1) / ps
	// Check every page before handing out any, so a failure returns nothing.
	for _, e := range s.table[:pages] {
		if err := p.check(e); err != nil {
			return dst, err
		}
	}
	dst = slices.Grow(dst, pages)
	for j, e := range s.table[:pages] {
		k, v := p.span(e.page, layer, 0, min(ps, n-j*ps))
		dst = append(dst, model.Span{K: k, V: v, Type: p.cfg.Type})
	}
	return dst, nil
}

// SpansRange appends one Span per page that positions [from, to) of
// layer touch, each clipped to the range: the same pages and offsets
// Spans lends for those positions, for a reader that checks a range just
// written (the transfer's read-back) without waiting for the run from 0
// to be contiguous. Every position in the range must have been written;
// each page's tag is checked once, and on a failure dst comes back
// unextended.
func (s *Seq) SpansRange(dst []model.Span, layer, from, to int) ([]model.Span, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return dst, err
	}
	if err := s.checkWritten(layer, from, to); err != nil {
		return dst, err
	}
	if err := p.checkRange(s.table, from, to); err != nil {
		return dst, err
	}
	return p.appendRange(dst, s.table, layer, from, to), nil
}

// WriteSpans appends one Span per page that positions [from, to) of layer
// touch, each clipped to the range, for the caller to fill, and marks
// the positions written: WriteTokens without the copy, for a writer that
// copies in its own way (the KV transfer checksums each vector as it
// copies it, with stores that skip the cache). Like Slot, it lends only
// the sequence's own pages, never a shared prefix page (ErrReadOnly), and
// a page whose tag does not match fails the call with nothing lent. The
// positions count as written from this call on, so the caller must fill
// them before anything reads the sequence (the transfer's sequence is
// read by no one until it is Ready, and a failed transfer frees it).
func (s *Seq) WriteSpans(dst []model.Span, layer, from, to int) ([]model.Span, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return dst, err
	}
	if err := s.checkCapacity(from, to); err != nil {
		return dst, err
	}
	if err := s.checkOwnRange(from, to); err != nil {
		return dst, err
	}
	ps := p.cfg.PageSize
	for pos := from; pos < to; pos++ {
		p.unseal(s.table[pos/ps].page, layer, pos%ps)
	}
	s.markWritten(layer, from, to)
	return p.appendRange(dst, s.table, layer, from, to), nil
}

// appendRange appends one Span per page that positions [from, to) of
// layer touch in table, each clipped to the range. The caller holds mu
// and has checked the range and the tags.
func (p *Pool) appendRange(dst []model.Span, table []entry, layer, from, to int) []model.Span {
	ps := p.cfg.PageSize
	for pos := from; pos < to; {
		j := pos / ps
		end := min(to, (j+1)*ps)
		k, v := p.span(table[j].page, layer, pos-j*ps, end-j*ps)
		dst = append(dst, model.Span{K: k, V: v, Type: p.cfg.Type})
		pos = end
	}
	return dst
}

// checkCapacity checks that positions [from, to) lie in the table. The
// caller holds mu.
func (s *Seq) checkCapacity(from, to int) error {
	if limit := len(s.table) * s.pool.cfg.PageSize; from < 0 || from > to || to > limit {
		return fmt.Errorf("%w: tokens [%d, %d), capacity %d", ErrRange, from, to, limit)
	}
	return nil
}

// checkOwnRange checks that positions [from, to) lie in the sequence's
// own pages, none of them a shared prefix page (ErrReadOnly), and
// tag-checks those pages: what every writer must pass. The caller holds
// mu.
func (s *Seq) checkOwnRange(from, to int) error {
	ps := s.pool.cfg.PageSize
	for j := from / ps; j*ps < to; j++ {
		if s.table[j].shared {
			return fmt.Errorf("%w: tokens [%d, %d) reach shared prefix page %d", ErrReadOnly, from, to, s.table[j].page)
		}
	}
	return s.pool.checkRange(s.table, from, to)
}

// checkWritten checks that positions [from, to) of layer lie in the
// table and were all written. The caller holds mu.
func (s *Seq) checkWritten(layer, from, to int) error {
	if err := s.checkCapacity(from, to); err != nil {
		return err
	}
	bits := s.written[layer]
	for pos := max(from, s.filled[layer]); pos < to; pos++ {
		if bits[pos>>6]&(1<<(pos&63)) == 0 {
			return fmt.Errorf("%w: position %d of layer %d was never written", ErrRange, pos, layer)
		}
	}
	return nil
}

// checkRange tag-checks every page of table that positions [from, to)
// touch. The caller holds mu.
func (p *Pool) checkRange(table []entry, from, to int) error {
	ps := p.cfg.PageSize
	for j := from / ps; j*ps < to; j++ {
		if err := p.check(table[j]); err != nil {
			return err
		}
	}
	return nil
}

// copyTokens moves tokens [from, to) of layer between the pages in table
// and the flat buffers k, v ([token][kvdim]). The caller holds mu and has
// range- and tag-checked everything.
func (p *Pool) copyTokens(table []entry, layer, from, to int, k, v []float32, write bool) {
	ps, kd := p.cfg.PageSize, p.words
	for pos := from; pos < to; {
		j := pos / ps
		end := min(to, (j+1)*ps)
		pk, pv := p.span(table[j].page, layer, pos-j*ps, end-j*ps)
		bk, bv := k[(pos-from)*kd:(end-from)*kd], v[(pos-from)*kd:(end-from)*kd]
		if write {
			copy(pk, bk)
			copy(pv, bv)
		} else {
			copy(bk, pk)
			copy(bv, pv)
		}
		pos = end
	}
}

func (p *Pool) checkCopy(layer, from, to, limit int, k, v []float32) error {
	if layer < 0 || layer >= p.cfg.Layers {
		return fmt.Errorf("%w: layer %d of %d", ErrRange, layer, p.cfg.Layers)
	}
	if from < 0 || from > to || to > limit {
		return fmt.Errorf("%w: tokens [%d, %d) of %d", ErrRange, from, to, limit)
	}
	if n := (to - from) * p.words; len(k) < n || len(v) < n {
		return fmt.Errorf("%w: tokens [%d, %d) need %d words, buffers hold %d and %d", ErrRange, from, to, n, len(k), len(v))
	}
	return nil
}

// ReadTokens copies the keys and values of positions [from, to) of layer
// into k and v, token-major in storage words (PoolConfig.RowWords per
// token), whatever pages they live on. The positions
// must have been written.
func (s *Seq) ReadTokens(layer, from, to int, k, v []float32) error {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return err
	}
	if err := p.checkCopy(layer, from, to, s.filled[layer], k, v); err != nil {
		return err
	}
	if err := p.checkRange(s.table, from, to); err != nil {
		return err
	}
	p.copyTokens(s.table, layer, from, to, k, v, false)
	return nil
}

// WriteTokens copies k and v (token-major storage words) into positions [from, to) of
// layer, for importing transferred KV into a reserved sequence. Positions
// may arrive in any order; they become readable once contiguous from 0.
func (s *Seq) WriteTokens(layer, from, to int, k, v []float32) error {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.checkLayer(layer); err != nil {
		return err
	}
	if err := p.checkCopy(layer, from, to, len(s.table)*p.cfg.PageSize, k, v); err != nil {
		return err
	}
	if err := s.checkOwnRange(from, to); err != nil {
		return err
	}
	p.copyTokens(s.table, layer, from, to, k, v, true)
	s.markWritten(layer, from, to)
	if p.sealed != nil {
		p.seal(s.table, layer, from, to)
	}
	return nil
}

// Truncate drops the positions from tokens on and returns whole pages past
// them to the pool (preemption's partial free). A shared page that tokens
// cuts through is dropped too, since the positions after the cut could not
// be rewritten in it; Len then ends at that page's start.
func (s *Seq) Truncate(tokens int) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed || tokens < 0 {
		return
	}
	ps := p.cfg.PageSize
	keep := min(p.pagesFor(tokens), len(s.table))
	if keep > 0 && s.table[keep-1].shared && keep*ps > tokens {
		keep--
		tokens = keep * ps
	}
	for _, e := range s.table[keep:] {
		p.drop(e.page, false)
	}
	s.table = s.table[:keep]
	for l, bits := range s.written {
		s.filled[l] = min(s.filled[l], tokens)
		for pos := tokens; pos < len(bits)*64; pos++ {
			bits[pos>>6] &^= 1 << (pos & 63)
		}
	}
}

// Free releases every page of the sequence. Pages still leased stay out of
// the free list until their last lease is released. Free is idempotent;
// every later call on s fails with ErrFreed.
func (s *Seq) Free() {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return
	}
	for _, e := range s.table {
		p.drop(e.page, false)
	}
	s.table, s.filled, s.written = nil, nil, nil
	s.freed = true
}
