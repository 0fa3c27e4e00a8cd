package kv

import (
	"errors"
	"hash/crc32"
	"math"

	"pgregory.net/rapid"
)

// More actions and invariants of TestPoolStateMachine (prop_test.go):
//
// 10. Every tenant's page count (what its quota is checked against) is the
//     number of non-free pages whose tag names it, and the pool counts as
//     many leases as are unreleased: accounting never drifts.
// 11. A shared reference that was released is not a hold: attaching it
//     succeeds only while the page still carries its tag as a shared page
//     (someone else keeps it alive), and otherwise fails with ErrOwnership,
//     counts one violation and takes no page.
// 12. A lease reads in place (Spans) what it covered when it was taken,
//     and every checksum it reports (Sums) is the CRC32C of that data.
// 13. Sizes near the top of int never wrap: an allocation or growth to
//     them fails as pool full (or over quota) and changes nothing, and a
//     truncation to them changes nothing.

// checkAccounting is invariant 10; check calls it after every action.
func (m *machine) checkAccounting(t *rapid.T) {
	p := m.p
	want := make([]int, len(p.tenantUsed))
	for i := range p.pages {
		if pg := &p.pages[i]; pg.state != pageFree {
			want[pg.tag.tenant]++
		}
	}
	for id, n := range p.tenantUsed {
		if n != want[id] {
			t.Fatalf("invariant 10: tenant %q is charged %d pages, its tags are on %d", p.tenantNames[id], n, want[id])
		}
	}
	if p.leases != len(m.leases) {
		t.Fatalf("invariant 10: pool counts %d leases, %d are unreleased", p.leases, len(m.leases))
	}
}

// attachReleased is invariant 11.
func (m *machine) attachReleased(t *rapid.T) {
	if len(m.released) == 0 {
		t.Skip("no released reference")
	}
	mr := m.released[rapid.IntRange(0, len(m.released)-1).Draw(t, "released")]
	pg := m.p.pages[mr.r.page]
	live := pg.tag == mr.r.tag && pg.state == pageShared
	before := m.p.Stats()
	m.next++
	s, err := m.p.AllocWithPrefix(Owner{"A", m.next}, []PageRef{mr.r}, pmPageSize)
	if !live {
		if !errors.Is(err, ErrOwnership) || s != nil {
			t.Fatalf("attaching a released reference to a freed page: %v, want ErrOwnership", err)
		}
		m.violations++
		if after := m.p.Stats(); after.Free != before.Free || after.Allocs != before.Allocs {
			t.Fatalf("a failed attach changed the pool: %+v → %+v", before, after)
		}
		return
	}
	if err != nil {
		t.Fatalf("attaching a released reference to a page still shared: %v", err)
	}
	ms := &mSeq{s: s}
	for l := range pmLayers {
		ms.stamps[l] = map[int]uint32{}
		for i, st := range mr.stamps[l] {
			ms.stamps[l][i] = st
		}
	}
	m.seqs = append(m.seqs, ms)
}

// leaseRead is invariant 12.
func (m *machine) leaseRead(t *rapid.T) {
	if len(m.leases) == 0 {
		t.Skip("no lease")
	}
	ml := m.leases[rapid.IntRange(0, len(m.leases)-1).Draw(t, "lease")]
	layer := rapid.IntRange(0, pmLayers-1).Draw(t, "layer")
	n := ml.l.Tokens()
	spans, err := ml.l.Spans(nil, layer, n)
	if err != nil {
		t.Fatalf("lease Spans: %v", err)
	}
	for pos := range n {
		wk, wv := expectVals(ml.stamps[layer][pos])
		sp, o := spans[pos/pmPageSize], pos%pmPageSize*pmKVDim
		if !equal(sp.K[o:o+pmKVDim], wk) || !equal(sp.V[o:o+pmKVDim], wv) {
			t.Fatalf("invariant 12: lease Spans of layer %d position %d differs from what was leased", layer, pos)
		}
	}
	k, v := make([]uint32, n), make([]uint32, n)
	if !ml.l.Sums(layer, 0, n, k, v) {
		return
	}
	for pos := range n {
		wk, wv := expectVals(ml.stamps[layer][pos])
		if k[pos] != crc32.Checksum(wordBytes(wk), castagnoli) || v[pos] != crc32.Checksum(wordBytes(wv), castagnoli) {
			t.Fatalf("invariant 12: lease Sums of layer %d position %d is not the checksum of the leased data", layer, pos)
		}
	}
}

// huge is invariant 13.
func (m *machine) huge(t *rapid.T) {
	tokens := math.MaxInt - rapid.IntRange(0, 2*pmPageSize).Draw(t, "below")
	before := m.p.Stats()
	m.next++
	if s, err := m.p.Alloc(Owner{"A", m.next}, tokens); !errors.Is(err, ErrPoolFull) {
		if s != nil {
			s.Free()
		}
		t.Fatalf("invariant 13: Alloc(%d): %v, want pool full", tokens, err)
	}
	if len(m.seqs) > 0 {
		ms := m.pick(t)
		capBefore := ms.s.Cap()
		if err := ms.s.Grow(tokens); !errors.Is(err, ErrPoolFull) && !errors.Is(err, ErrQuota) {
			t.Fatalf("invariant 13: Grow(%d): %v, want pool full or quota", tokens, err)
		}
		ms.s.Truncate(tokens)
		if c := ms.s.Cap(); c != capBefore {
			t.Fatalf("invariant 13: capacity %d became %d", capBefore, c)
		}
	}
	if after := m.p.Stats(); after.Free != before.Free || after.Allocs != before.Allocs {
		t.Fatalf("invariant 13: huge sizes changed the pool: %+v → %+v", before, after)
	}
}
