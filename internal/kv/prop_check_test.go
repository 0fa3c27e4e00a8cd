package kv

import (
	"hash/crc32"

	"pgregory.net/rapid"
)

// check runs after every action of TestPoolStateMachine: invariants 1,
// 2, 3, 5 and 8 of prop_test.go's list, against the pool's own state,
// and 9 (checkSums) for a pool that keeps checksums.
func (m *machine) check(t *rapid.T) {
	p := m.p
	owner := map[int32]*Seq{}
	referenced := map[int32]bool{}
	for _, ms := range m.seqs {
		for _, e := range ms.s.table {
			pg := p.pages[e.page]
			referenced[e.page] = true
			if e.shared {
				if pg.tag != e.tag || pg.state != pageShared {
					t.Fatalf("invariant 1: shared entry of page %d expects %+v, page has %+v", e.page, e.tag, pg.tag)
				}
				continue
			}
			if o := owner[e.page]; o != nil {
				t.Fatalf("invariant 1: page %d owned by requests %d and %d", e.page, o.owner.Request, ms.s.owner.Request)
			}
			owner[e.page] = ms.s
			if pg.state != pageOwned || pg.tag.request != ms.s.owner.Request || p.tenantNames[pg.tag.tenant] != ms.s.owner.Tenant {
				t.Fatalf("invariant 1: page %d is tagged for another owner than request %d", e.page, ms.s.owner.Request)
			}
		}
	}
	for _, r := range m.refs {
		referenced[r.r.page] = true
	}
	for _, l := range m.leases {
		for _, e := range l.l.pages {
			referenced[e.page] = true
		}
	}
	onFree := map[int32]bool{}
	for _, i := range p.free {
		if onFree[i] {
			t.Fatalf("invariant 3: page %d is on the free list twice", i)
		}
		onFree[i] = true
		if referenced[i] {
			t.Fatalf("invariant 2: page %d is on the free list while referenced", i)
		}
	}
	st := p.Stats()
	if st.Free+st.Owned+st.Shared+st.Pending != pmPages || st.Free != len(onFree) {
		t.Fatalf("stats do not add up: %+v", st)
	}
	if err := p.CheckScrubbed(); err != nil {
		t.Fatalf("invariant 3: %v", err)
	}
	if st.Violations != m.violations {
		t.Fatalf("invariant 5: %d violations counted, %d expected", st.Violations, m.violations)
	}
	if st.TenantPages["B"] > pmQuotaB {
		t.Fatalf("invariant 8: tenant B holds %d pages, quota %d", st.TenantPages["B"], pmQuotaB)
	}
	m.checkSums(t, onFree)
	m.checkAccounting(t)
}

// checkSums is invariant 9, for a pool with Checksums: every checksum
// the pool holds as valid is the CRC32C of its vector's words as they are
// now, and a free page holds none.
func (m *machine) checkSums(t *rapid.T, onFree map[int32]bool) {
	p := m.p
	if p.sealed == nil {
		return
	}
	for i := range int32(p.cfg.Pages) {
		for l := range p.cfg.Layers {
			for slot := range p.cfg.PageSize {
				c := p.cell(i, l, slot)
				if p.sealed[c>>6]&(1<<(c&63)) == 0 {
					continue
				}
				if onFree[i] {
					t.Fatalf("invariant 9: free page %d still holds the checksum of layer %d slot %d", i, l, slot)
				}
				k, v := p.span(i, l, slot, slot+1)
				if p.sums[2*c] != crc32.Checksum(wordBytes(k), castagnoli) || p.sums[2*c+1] != crc32.Checksum(wordBytes(v), castagnoli) {
					t.Fatalf("invariant 9: page %d layer %d slot %d: kept checksum does not match its vector", i, l, slot)
				}
			}
		}
	}
}
