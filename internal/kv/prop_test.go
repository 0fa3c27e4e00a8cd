package kv

import (
	"errors"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/model"
	"pgregory.net/rapid"
)

// The page-lifecycle state machine, checked against a model after every
// action. The invariants, in words:
//
//  1. One owner per page: a page is in at most one live sequence's table as
//     an owned (writable) entry, and that sequence's owner is in its tag;
//     every shared entry of it expects the page's current tag.
//  2. No page is on the free list while a live sequence's table, a held
//     shared reference or an unreleased lease refers to it.
//  3. Every page on the free list is scrubbed (CheckScrubbed), and the
//     free list holds each free page exactly once.
//  4. A page's generation strictly increases across reuse: each time a page
//     shows up in a new table as freshly allocated, its generation is above
//     any generation it was seen at before.
//  5. A read through a stale table entry (its page was freed and reused, or
//     it names another owner) fails with ErrOwnership, returns no data and
//     adds exactly one violation; nothing else adds violations.
//  6. Data a sequence wrote (or attached as a prefix) reads back bit for bit
//     through Spans, ReadTokens and leases.
//  7. Once every sequence is freed and every lease and reference released,
//     every page is free and scrubbed and no tenant is charged: nothing leaked.
//  8. A tenant never holds more pages than its quota.
//  9. In a pool that keeps checksums, every checksum it holds as valid is
//     the CRC32C of its vector as it is now, and a free page holds none.

const (
	pmPages    = 12
	pmPageSize = 3
	pmLayers   = 2
	pmKVDim    = 2
	pmQuotaB   = 5
)

type mSeq struct {
	s      *Seq
	stamps [pmLayers]map[int]uint32 // written position → stamp
}

type mLease struct {
	l      *Lease
	stamps [pmLayers]map[int]uint32
}

type mRef struct {
	r      PageRef
	stamps [pmLayers][pmPageSize]uint32
}

type machine struct {
	p          *Pool
	seqs       []*mSeq
	leases     []*mLease
	refs       []*mRef
	released   []*mRef // shared references already released (invariant 11)
	stale      []*Seq  // forged copies of freed tables
	next       uint64  // request ids
	stamp      uint32
	violations uint64
	lastGen    map[int32]uint64
}

func (m *machine) filled(ms *mSeq, layer int) int {
	n := 0
	for {
		if _, ok := ms.stamps[layer][n]; !ok {
			return n
		}
		n++
	}
}

func (m *machine) len(ms *mSeq) int {
	return min(m.filled(ms, 0), m.filled(ms, 1))
}

// seenFresh checks invariant 4 for pages newly allocated to s.
func (m *machine) seenFresh(t *rapid.T, s *Seq, from int) {
	for _, e := range s.table[from:] {
		if e.shared {
			continue
		}
		if g, ok := m.lastGen[e.page]; ok && e.tag.gen <= g {
			t.Fatalf("page %d reallocated at generation %d, already seen at %d", e.page, e.tag.gen, g)
		}
		m.lastGen[e.page] = e.tag.gen
	}
}

func expectVals(stamp uint32) (k, v []float32) { return fill(pmKVDim, stamp) }

func (m *machine) alloc(t *rapid.T) {
	tenant := rapid.SampledFrom([]string{"A", "B"}).Draw(t, "tenant")
	tokens := rapid.IntRange(0, 4*pmPageSize).Draw(t, "tokens")
	var prefix []*mRef
	if len(m.refs) > 0 && rapid.Bool().Draw(t, "withPrefix") {
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(m.refs)-1), 1, 3).Draw(t, "prefix") {
			prefix = append(prefix, m.refs[i])
		}
	}
	refs := make([]PageRef, len(prefix))
	for i, r := range prefix {
		refs[i] = r.r
	}
	before := m.p.Stats()
	m.next++
	s, err := m.p.AllocWithPrefix(Owner{tenant, m.next}, refs, tokens)
	need := max(0, (tokens+pmPageSize-1)/pmPageSize-len(prefix))
	if err != nil {
		var q *QuotaError
		var full *PoolFullError
		switch {
		case errors.As(err, &q):
			if tenant != "B" || q.Used+need <= pmQuotaB {
				t.Fatalf("quota error for %s needing %d: %v", tenant, need, err)
			}
		case errors.As(err, &full):
			if full.Free != before.Free || need <= before.Free {
				t.Fatalf("pool full with %d free for %d pages: %v", before.Free, need, err)
			}
		default:
			t.Fatalf("Alloc: %v", err)
		}
		if after := m.p.Stats(); after.Free != before.Free {
			t.Fatalf("failed Alloc changed free pages %d → %d", before.Free, after.Free)
		}
		return
	}
	ms := &mSeq{s: s}
	for l := range pmLayers {
		ms.stamps[l] = map[int]uint32{}
		for j, r := range prefix {
			for i, st := range r.stamps[l] {
				ms.stamps[l][j*pmPageSize+i] = st
			}
		}
	}
	m.seenFresh(t, s, len(prefix))
	m.seqs = append(m.seqs, ms)
}

func (m *machine) pick(t *rapid.T) *mSeq {
	if len(m.seqs) == 0 {
		t.Skip("no sequence")
	}
	return m.seqs[rapid.IntRange(0, len(m.seqs)-1).Draw(t, "seq")]
}

func (m *machine) grow(t *rapid.T) {
	ms := m.pick(t)
	old := len(ms.s.table)
	if err := ms.s.Grow(rapid.IntRange(0, 5*pmPageSize).Draw(t, "tokens")); err != nil {
		if !errors.Is(err, ErrPoolFull) && !errors.Is(err, ErrQuota) {
			t.Fatalf("Grow: %v", err)
		}
		if len(ms.s.table) != old {
			t.Fatalf("failed Grow changed the table from %d to %d pages", old, len(ms.s.table))
		}
		return
	}
	m.seenFresh(t, ms.s, old)
}

func (m *machine) write(t *rapid.T) {
	ms := m.pick(t)
	capTokens := ms.s.Cap()
	if capTokens == 0 {
		t.Skip("empty table")
	}
	layers := []int{0, 1}
	if rapid.Bool().Draw(t, "oneLayer") {
		layers = []int{rapid.IntRange(0, pmLayers-1).Draw(t, "layer")}
	}
	// Mostly append at the end of the written run, as the forward pass
	// does; sometimes anywhere, as reordered transfer frames do.
	from := m.filled(ms, layers[0])
	if len(layers) > 1 {
		from = m.len(ms)
	}
	if from >= capTokens || rapid.IntRange(0, 3).Draw(t, "anywhere") == 0 {
		from = rapid.IntRange(0, capTokens-1).Draw(t, "from")
	}
	to := rapid.IntRange(from+1, min(capTokens, from+2*pmPageSize)).Draw(t, "to")
	shared := false
	for j := from / pmPageSize; j*pmPageSize < to; j++ {
		e := ms.s.table[j]
		if m.p.pages[e.page].pins > 0 {
			// A transfer is reading these pages; the engine does not write
			// them, so neither does the model.
			t.Skip("leased page")
		}
		shared = shared || e.shared
	}
	// Three ways in: Slot per position (the forward pass), WriteTokens
	// (a copy), WriteSpans (memory lent for a range, as the transfer
	// copies into it).
	via := rapid.IntRange(0, 2).Draw(t, "via")
	viaSlot := via == 0
	for _, layer := range layers {
		k := make([]float32, (to-from)*pmKVDim)
		v := make([]float32, len(k))
		stamps := make([]uint32, to-from)
		for i := range stamps {
			m.stamp++
			stamps[i] = m.stamp
			wk, wv := expectVals(m.stamp)
			copy(k[i*pmKVDim:], wk)
			copy(v[i*pmKVDim:], wv)
		}
		var err error
		if viaSlot {
			for i := range stamps {
				var sk, sv []float32
				if sk, sv, err = ms.s.Slot(layer, from+i); err != nil {
					break
				}
				copy(sk, k[i*pmKVDim:])
				copy(sv, v[i*pmKVDim:])
				ms.stamps[layer][from+i] = stamps[i]
			}
			// The forward pass seals what it wrote, but a write may also
			// stop short of it (a failed step): both must leave every
			// kept checksum true (invariant 9).
			if err == nil && rapid.Bool().Draw(t, "seal") {
				err = ms.s.Seal(layer, from, to)
			}
		} else if via == 2 {
			var spans []model.Span
			if spans, err = ms.s.WriteSpans(nil, layer, from, to); err == nil {
				off := 0
				for _, sp := range spans {
					copy(sp.K, k[off:])
					copy(sp.V, v[off:])
					off += len(sp.K)
				}
				for i := range stamps {
					ms.stamps[layer][from+i] = stamps[i]
				}
			}
		} else if err = ms.s.WriteTokens(layer, from, to, k, v); err == nil {
			for i := range stamps {
				ms.stamps[layer][from+i] = stamps[i]
			}
		}
		if shared != errors.Is(err, ErrReadOnly) || (err != nil && !shared) {
			t.Fatalf("write [%d, %d) of layer %d (shared page: %v): %v", from, to, layer, shared, err)
		}
	}
}

// checkRead verifies invariant 6 for one live sequence and layer.
func (m *machine) checkRead(t *rapid.T, ms *mSeq, layer int) {
	n := m.filled(ms, layer)
	spans, err := ms.s.Spans(nil, layer, n)
	if err != nil {
		t.Fatalf("Spans(%d, %d): %v", layer, n, err)
	}
	for pos := range n {
		wk, wv := expectVals(ms.stamps[layer][pos])
		sp := spans[pos/pmPageSize]
		o := pos % pmPageSize * pmKVDim
		if !equal(sp.K[o:o+pmKVDim], wk) || !equal(sp.V[o:o+pmKVDim], wv) {
			t.Fatalf("request %d layer %d position %d reads %v, wrote %v", ms.s.owner.Request, layer, pos, sp.K[o:o+pmKVDim], wk)
		}
	}
	if _, err := ms.s.Spans(nil, layer, n+1); !errors.Is(err, ErrRange) {
		t.Fatalf("Spans one past the written run %d: %v, want ErrRange", n, err)
	}
}

func (m *machine) read(t *rapid.T) {
	ms := m.pick(t)
	layer := rapid.IntRange(0, pmLayers-1).Draw(t, "layer")
	m.checkRead(t, ms, layer)
	n := m.filled(ms, layer)
	if n == 0 {
		return
	}
	from := rapid.IntRange(0, n-1).Draw(t, "from")
	buf := make([]float32, (n-from)*pmKVDim*2)
	k, v := buf[:len(buf)/2], buf[len(buf)/2:]
	if err := ms.s.ReadTokens(layer, from, n, k, v); err != nil {
		t.Fatalf("ReadTokens: %v", err)
	}
	for pos := from; pos < n; pos++ {
		wk, _ := expectVals(ms.stamps[layer][pos])
		if !equal(k[(pos-from)*pmKVDim:(pos-from+1)*pmKVDim], wk) {
			t.Fatalf("ReadTokens position %d differs", pos)
		}
	}
}

func (m *machine) lease(t *rapid.T) {
	ms := m.pick(t)
	l, err := ms.s.Lease()
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if l.Tokens() != m.len(ms) {
		t.Fatalf("lease covers %d tokens, sequence has %d", l.Tokens(), m.len(ms))
	}
	ml := &mLease{l: l}
	for layer := range pmLayers {
		ml.stamps[layer] = map[int]uint32{}
		for pos := range l.Tokens() {
			ml.stamps[layer][pos] = ms.stamps[layer][pos]
		}
	}
	m.leases = append(m.leases, ml)
}

func (m *machine) unlease(t *rapid.T) {
	if len(m.leases) == 0 {
		t.Skip("no lease")
	}
	i := rapid.IntRange(0, len(m.leases)-1).Draw(t, "lease")
	ml := m.leases[i]
	n := ml.l.Tokens()
	k, v := make([]float32, n*pmKVDim), make([]float32, n*pmKVDim)
	for layer := range pmLayers {
		if err := ml.l.ReadTokens(layer, 0, n, k, v); err != nil {
			t.Fatalf("lease ReadTokens: %v", err)
		}
		for pos := range n {
			wk, wv := expectVals(ml.stamps[layer][pos])
			if !equal(k[pos*pmKVDim:(pos+1)*pmKVDim], wk) || !equal(v[pos*pmKVDim:(pos+1)*pmKVDim], wv) {
				t.Fatalf("lease read of layer %d position %d differs from what was leased", layer, pos)
			}
		}
	}
	if err := ml.l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := ml.l.Release(); !errors.Is(err, ErrReleased) {
		t.Fatalf("second Release: %v", err)
	}
	m.leases = append(m.leases[:i], m.leases[i+1:]...)
}

func (m *machine) free(t *rapid.T) {
	ms := m.pick(t)
	m.stale = append(m.stale, forge(ms.s, nil))
	ms.s.Free()
	if _, err := ms.s.Spans(nil, 0, 0); !errors.Is(err, ErrFreed) {
		t.Fatalf("Spans after Free: %v", err)
	}
	for i := range m.seqs {
		if m.seqs[i] == ms {
			m.seqs = append(m.seqs[:i], m.seqs[i+1:]...)
			break
		}
	}
}

func (m *machine) truncate(t *rapid.T) {
	ms := m.pick(t)
	tokens := rapid.IntRange(0, ms.s.Cap()).Draw(t, "tokens")
	keep := (tokens + pmPageSize - 1) / pmPageSize
	if keep > 0 && ms.s.table[keep-1].shared && keep*pmPageSize > tokens {
		keep--
		tokens = keep * pmPageSize
	}
	ms.s.Truncate(tokens)
	if ms.s.Cap() != keep*pmPageSize {
		t.Fatalf("Truncate: capacity %d, want %d", ms.s.Cap(), keep*pmPageSize)
	}
	for layer := range pmLayers {
		for pos := range ms.stamps[layer] {
			if pos >= tokens {
				delete(ms.stamps[layer], pos)
			}
		}
	}
}

func (m *machine) share(t *rapid.T) {
	ms := m.pick(t)
	full := m.len(ms) / pmPageSize
	if full == 0 || len(m.refs) >= 6 {
		t.Skip("no full page")
	}
	i := rapid.IntRange(0, full-1).Draw(t, "page")
	m.next++
	r, err := ms.s.SharePage(i, Owner{"cache", m.next})
	if err != nil {
		t.Fatalf("SharePage(%d): %v", i, err)
	}
	mr := &mRef{r: r}
	for layer := range pmLayers {
		for j := range pmPageSize {
			mr.stamps[layer][j] = ms.stamps[layer][i*pmPageSize+j]
		}
	}
	m.refs = append(m.refs, mr)
}

func (m *machine) releaseRef(t *rapid.T) {
	if len(m.refs) == 0 {
		t.Skip("no reference")
	}
	i := rapid.IntRange(0, len(m.refs)-1).Draw(t, "ref")
	if err := m.p.Release(m.refs[i].r); err != nil {
		t.Fatalf("Release ref: %v", err)
	}
	m.released = append(m.released, m.refs[i])
	m.refs = append(m.refs[:i], m.refs[i+1:]...)
}

// staleRead checks invariant 5 through a table that outlived its sequence,
// or a live table under another owner's tags.
func (m *machine) staleRead(t *rapid.T) {
	var s *Seq
	var stamps *mSeq
	if len(m.seqs) > 0 && rapid.Bool().Draw(t, "wrongOwner") {
		ms := m.pick(t)
		m.next++
		s, stamps = forge(ms.s, &Owner{"intruder", m.next}), ms
		hasOwned := false
		for _, e := range s.table[:(m.len(ms)+pmPageSize-1)/pmPageSize] {
			hasOwned = hasOwned || !e.shared
		}
		if !hasOwned {
			t.Skip("nothing owned to intrude on")
		}
	} else {
		if len(m.stale) == 0 {
			t.Skip("no stale table")
		}
		s = m.stale[rapid.IntRange(0, len(m.stale)-1).Draw(t, "stale")]
	}
	n := 0
	for _, f := range s.filled {
		n = max(n, f)
	}
	layer := 0
	if s.filled[1] > s.filled[0] {
		layer = 1
	}
	if n == 0 {
		t.Skip("nothing written")
	}
	if stamps != nil {
		n, layer = m.filled(stamps, 0), 0
		if n == 0 {
			t.Skip("nothing written")
		}
	}
	got, err := s.Spans(nil, layer, n)
	if err != nil {
		if !errors.Is(err, ErrOwnership) || len(got) != 0 {
			t.Fatalf("stale Spans: %d spans, %v; want ErrOwnership and nothing", len(got), err)
		}
		m.violations++
		return
	}
	// Success is only allowed for a freed table none of whose pages has
	// been freed since: each is pinned by a lease (release pending) or is a
	// shared page another holder keeps alive. Then the data is still what
	// that sequence could read.
	if stamps != nil {
		t.Fatalf("Spans under a wrong owner returned data")
	}
	for _, e := range s.table[:(n+pmPageSize-1)/pmPageSize] {
		if pg := m.p.pages[e.page]; pg.tag != e.tag || (pg.pins == 0 && pg.state != pageShared) {
			t.Fatalf("stale Spans returned page %d (pins %d, state %d)", e.page, pg.pins, pg.state)
		}
	}
}

func TestPoolStateMachine(t *testing.T) {
	ran := map[string]int{}
	// The machine counts in storage words (pmKVDim per token): an f32 pool
	// of pmKVDim elements and an f16 pool of twice as many hold the same.
	type variant struct {
		mode  ScrubMode
		typ   model.KVType
		kvDim int
		sums  bool
	}
	for _, vr := range []variant{{ScrubPoison, model.KVF32, pmKVDim, false}, {ScrubZero, model.KVF32, pmKVDim, true}, {ScrubPoison, model.KVF16, 2 * pmKVDim, true}} {
		mode := vr.mode
		name := mode.String() + "/" + vr.typ.String()
		if vr.sums {
			name += "/checksums"
		}
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				p, err := NewPool(PoolConfig{Pages: pmPages, PageSize: pmPageSize, Layers: pmLayers, KVDim: vr.kvDim, Type: vr.typ,
					Scrub: mode, TenantPages: map[string]int{"B": pmQuotaB}, Checksums: vr.sums})
				if err != nil {
					t.Fatal(err)
				}
				m := &machine{p: p, lastGen: map[int32]uint64{}}
				actions := map[string]func(*rapid.T){
					"":               m.check,
					"alloc":          m.alloc,
					"grow":           m.grow,
					"write":          m.write,
					"read":           m.read,
					"lease":          m.lease,
					"unlease":        m.unlease,
					"free":           m.free,
					"truncate":       m.truncate,
					"share":          m.share,
					"release":        m.releaseRef,
					"stale":          m.staleRead,
					"attachReleased": m.attachReleased,
					"leaseRead":      m.leaseRead,
					"huge":           m.huge,
					// Writing and sharing need a few steps of setup each, so
					// they get a double share of the draws.
					"write2": m.write,
					"share2": m.share,
				}
				for name, act := range actions {
					if name != "" {
						actions[name] = func(t *rapid.T) { act(t); ran[name]++ }
					}
				}
				// Repeat runs about 30 actions; a few rounds reach deeper
				// states (leases over shared pages over reused pages).
				for range 4 {
					t.Repeat(actions)
				}
				// Invariant 7: tear everything down; nothing may be left.
				for _, ms := range m.seqs {
					ms.s.Free()
				}
				for _, l := range m.leases {
					if err := l.l.Release(); err != nil {
						t.Fatal(err)
					}
				}
				for _, r := range m.refs {
					if err := p.Release(r.r); err != nil {
						t.Fatal(err)
					}
				}
				st := p.Stats()
				if st.Free != pmPages || len(st.TenantPages) != 0 || st.Leases != 0 {
					t.Fatalf("invariant 7: leaked after teardown: %+v", st)
				}
				if err := p.CheckScrubbed(); err != nil {
					t.Fatalf("invariant 7: %v", err)
				}
			})
		})
	}
	t.Logf("actions completed: %v", ran)
	for _, name := range []string{"share", "stale", "unlease", "release", "truncate", "attachReleased", "leaseRead", "huge"} {
		if ran[name]+ran[name+"2"] == 0 {
			t.Errorf("action %q never completed: the generators no longer reach it", name)
		}
	}
}
