package kv

import (
	"fmt"
	"slices"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// Lease pins pages of a sequence so they cannot go back to the free list:
// while KV frames are in flight (released on the peer's acknowledgement),
// or while an asynchronous reader copies them. Freeing or truncating the
// sequence meanwhile leaves the pages "release pending"; the last Release
// scrubs them and returns them to the pool.
//
// A lease is also a read capability: ReadTokens works on it even after the
// sequence is freed, because the pinned pages cannot have been reused.
type Lease struct {
	pool     *Pool
	pages    []entry
	tokens   int
	released bool
}

// Lease pins every page the sequence holds now and covers its Len()
// written positions. Pages added later by Grow are not covered.
func (s *Seq) Lease() (*Lease, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return nil, ErrFreed
	}
	for _, e := range s.table {
		if err := p.check(e); err != nil {
			return nil, err
		}
	}
	l := &Lease{pool: p, pages: append([]entry(nil), s.table...), tokens: s.lenLocked()}
	for _, e := range l.pages {
		p.pages[e.page].pins++
	}
	p.holdGen++
	p.leases++
	return l, nil
}

// Tokens is the number of positions the lease can read.
func (l *Lease) Tokens() int { return l.tokens }

// Release unpins the pages, freeing those nothing else holds. A second
// Release fails with ErrReleased and changes nothing.
func (l *Lease) Release() error {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: lease over %d pages", ErrReleased, len(l.pages))
	}
	l.released = true
	p.leases--
	for _, e := range l.pages {
		p.drop(e.page, true)
	}
	return nil
}

// Live reports whether the lease still pins its pages: Release has not
// been called. A reader that holds slices of the pages (Spans) checks it
// before each use, since after Release the pages may be scrubbed and
// handed to another tenant.
func (l *Lease) Live() bool {
	l.pool.mu.Lock()
	defer l.pool.mu.Unlock()
	return !l.released
}

// ReadTokens copies positions [from, to) of layer, as Seq.ReadTokens does,
// through the pinned pages. Tags are compared by page generation only: a
// page shared to the prefix cache after the lease was taken changes owner
// but keeps its data.
func (l *Lease) ReadTokens(layer, from, to int, k, v []float32) error {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: read through a released lease", ErrReleased)
	}
	if err := p.checkCopy(layer, from, to, l.tokens, k, v); err != nil {
		return err
	}
	ps := p.cfg.PageSize
	for _, e := range l.pages[from/ps : (to+ps-1)/ps] {
		if pg := &p.pages[e.page]; pg.tag.gen != e.tag.gen || pg.state == pageFree {
			// The pin should make this impossible; count it like any other
			// failed ownership check.
			p.violations++
			return &OwnershipError{Page: int(e.page), WantGen: e.tag.gen, HaveGen: pg.tag.gen, Reason: "leased page was freed"}
		}
	}
	p.copyTokens(l.pages, layer, from, to, k, v, false)
	return nil
}

// Spans appends one Span per page covering positions [0, n) of layer,
// as Seq.Spans does, through the pinned pages: a read in place, for a
// reader (the transfer digest) that would otherwise copy every page out.
// The tags are checked as ReadTokens checks them. The slices stay valid
// until Release, and must only be read: the pages may be shared.
func (l *Lease) Spans(dst []model.Span, layer, n int) ([]model.Span, error) {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.released {
		return dst, fmt.Errorf("%w: read through a released lease", ErrReleased)
	}
	if layer < 0 || layer >= p.cfg.Layers {
		return dst, fmt.Errorf("%w: layer %d of %d", ErrRange, layer, p.cfg.Layers)
	}
	if n < 0 || n > l.tokens {
		return dst, fmt.Errorf("%w: %d positions requested, the lease covers %d", ErrRange, n, l.tokens)
	}
	ps := p.cfg.PageSize
	pages := l.pages[:(n+ps-1)/ps]
	for _, e := range pages {
		if pg := &p.pages[e.page]; pg.tag.gen != e.tag.gen || pg.state == pageFree {
			p.violations++
			return dst, &OwnershipError{Page: int(e.page), WantGen: e.tag.gen, HaveGen: pg.tag.gen, Reason: "leased page was freed"}
		}
	}
	dst = slices.Grow(dst, len(pages))
	for j, e := range pages {
		k, v := p.span(e.page, layer, 0, min(ps, n-j*ps))
		dst = append(dst, model.Span{K: k, V: v, Type: p.cfg.Type})
	}
	return dst, nil
}

// PageRef names one shared, read-only page and the tag it carries. Holding
// a PageRef value is not holding the page: references are counted only
// through SharePage (one hold, dropped with Pool.Release) and through the
// page tables of sequences that attach the page.
type PageRef struct {
	page int32
	tag  tag
	own  Owner
}

// Page is the page index, for logs and tests.
func (r PageRef) Page() int { return int(r.page) }

// Gen is the page's generation when it was shared.
func (r PageRef) Gen() uint64 { return r.tag.gen }

// Owner is the owner the page is tagged with (a prefix-cache entry).
func (r PageRef) Owner() Owner { return r.own }

// checkRef verifies that r still names a live shared page as tagged. The
// caller holds mu.
func (p *Pool) checkRef(r PageRef) error {
	if r.page < 0 || int(r.page) >= len(p.pages) {
		return fmt.Errorf("%w: page %d of %d", ErrRange, r.page, len(p.pages))
	}
	if err := p.check(entry{page: r.page, tag: r.tag}); err != nil {
		return err
	}
	if p.pages[r.page].state != pageShared {
		p.violations++
		return &OwnershipError{Page: int(r.page), WantGen: r.tag.gen, HaveGen: r.tag.gen, Reason: "page is not shared"}
	}
	return nil
}

// SharePage makes page i of the table (which must be full: every layer
// written through its last position) a shared, read-only page tagged with
// owner, and returns a reference that holds it: the caller must call
// Pool.Release(ref) exactly once. The page's accounting moves from the
// sequence's tenant to owner.Tenant. The sequence keeps reading it.
//
// If page i is already shared (attached from the cache), the existing tag
// is kept and owner is ignored; the returned ref says which owner it has.
func (s *Seq) SharePage(i int, owner Owner) (PageRef, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return PageRef{}, ErrFreed
	}
	if i < 0 || i >= len(s.table) {
		return PageRef{}, fmt.Errorf("%w: page %d of a %d-page table", ErrRange, i, len(s.table))
	}
	if n, need := s.lenLocked(), (i+1)*p.cfg.PageSize; n < need {
		return PageRef{}, fmt.Errorf("%w: page %d is not full: %d positions written, %d needed", ErrRange, i, n, need)
	}
	e := &s.table[i]
	if err := p.check(*e); err != nil {
		return PageRef{}, err
	}
	pg := &p.pages[e.page]
	if !e.shared {
		id := p.intern(owner.Tenant)
		p.tenantUsed[pg.tag.tenant]--
		p.tenantUsed[id]++
		pg.tag.tenant, pg.tag.request = id, owner.Request
		pg.state = pageShared
		e.shared, e.tag = true, pg.tag
	}
	pg.holders++
	pg.refs++
	p.holdGen++
	return PageRef{page: e.page, tag: e.tag, own: Owner{Tenant: p.tenantNames[e.tag.tenant], Request: e.tag.request}}, nil
}

// Idle reports whether releasing r would free its page now: r still names
// the live shared page it was taken on, and one SharePage hold is all that
// keeps it (no sequence attaches it, no lease pins it). The prefix cache
// evicts only such pages when the pool runs short: dropping its hold on a
// page that others still hold frees nothing, and only costs the cache's
// owner its entry.
func (p *Pool) Idle(r PageRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle(r)
}

// IdleEach sets idle[i] to Idle(refs[i]) for every ref, under one hold of
// the pool's lock: a prefix cache counting what it could give back asks
// about every block it holds. It returns the HoldGen the answers hold at.
func (p *Pool) IdleEach(refs []PageRef, idle []bool) (holdGen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range refs {
		idle[i] = p.idle(r)
	}
	return p.holdGen
}

// HoldGen is a counter that moves whenever any page gains or loses a
// hold, a pin or a share: while it stands still, Idle gives every ref the
// answer it gave before. A prefix cache asked each scheduler step what it
// could give back, while a queue waits for pages that running sequences
// hold, answers from its last count instead of walking every block again.
func (p *Pool) HoldGen() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holdGen
}

func (p *Pool) idle(r PageRef) bool {
	if r.page < 0 || int(r.page) >= len(p.pages) {
		return false
	}
	pg := &p.pages[r.page]
	return pg.state == pageShared && pg.tag == r.tag && pg.holders == 1 && pg.refs == 1 && pg.pins == 0
}

// Release drops a hold taken by SharePage. A ref whose page has since been
// freed fails with ErrOwnership; a page with no SharePage hold left fails
// with ErrReleased.
func (p *Pool) Release(r PageRef) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.checkRef(r); err != nil {
		return err
	}
	pg := &p.pages[r.page]
	if pg.refs == 0 {
		return fmt.Errorf("%w: page %d has no shared reference left to release", ErrReleased, r.page)
	}
	pg.refs--
	p.drop(r.page, false)
	return nil
}
