package kv

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

func testPool(t testing.TB, pages int, mode ScrubMode) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Pages: pages, PageSize: 4, Layers: 2, KVDim: 3, Scrub: mode})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fill returns the K and V a test writes for (stamp, position): distinct
// per stamp and position, finite, and never zero or poison.
func fill(kd int, stamp uint32) (k, v []float32) {
	k, v = make([]float32, kd), make([]float32, kd)
	for i := range k {
		k[i] = float32(stamp)*8 + float32(i) + 1
		v[i] = -k[i]
	}
	return k, v
}

// forge returns a live Seq with s's page table and (optionally) another
// owner's tags: what a table entry that outlived its page looks like, or a
// table pointed at someone else's pages.
func forge(s *Seq, owner *Owner) *Seq {
	f := &Seq{pool: s.pool, owner: s.owner, tenant: s.tenant}
	f.table = append([]entry(nil), s.table...)
	f.filled = append([]int(nil), s.filled...)
	f.written = make([][]uint64, len(s.written))
	for l := range s.written {
		f.written[l] = append([]uint64(nil), s.written[l]...)
	}
	if owner != nil {
		f.owner = *owner
		f.tenant = s.pool.intern(owner.Tenant)
		for i := range f.table {
			if !f.table[i].shared {
				f.table[i].tag.tenant, f.table[i].tag.request = f.tenant, owner.Request
			}
		}
	}
	return f
}

func writeAll(t *testing.T, s *Seq, n int, stamp uint32) {
	t.Helper()
	for l := range 2 {
		for pos := range n {
			k, v, err := s.Slot(l, pos)
			if err != nil {
				t.Fatalf("Slot(%d, %d): %v", l, pos, err)
			}
			wk, wv := fill(3, stamp+uint32(pos))
			copy(k, wk)
			copy(v, wv)
		}
	}
}

func TestNewPoolRejectsBadConfig(t *testing.T) {
	for _, c := range []PoolConfig{
		{Pages: 0, PageSize: 4, Layers: 1, KVDim: 1},
		{Pages: 1, PageSize: -4, Layers: 1, KVDim: 1},
		{Pages: 1, PageSize: 4, Layers: 1, KVDim: 1, Scrub: 9},
		{Pages: 1, PageSize: 4, Layers: 1, KVDim: 1, TenantPages: map[string]int{"a": -1}},
		{Pages: math.MaxInt32, PageSize: 1 << 20, Layers: 1 << 10, KVDim: 1 << 10},
		// No overflow, but 2 × 2^49 bytes: more than one Go allocation may
		// hold, so make would panic rather than fail.
		{Pages: 1 << 27, PageSize: 1 << 10, Layers: 16, KVDim: 64},
	} {
		if _, err := NewPool(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewPool(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

func TestSpansMatchDenseCache(t *testing.T) {
	cfg := &model.Config{Layers: 2, KVHeads: 1, HeadDim: 3}
	p, err := NewPool(ConfigFor(cfg, 8, 4))
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Alloc(Owner{"a", 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	d := model.NewDenseCache(cfg, 10)
	for l := range 2 {
		for pos := range 10 {
			wk, wv := fill(3, uint32(100*l+pos))
			for _, c := range []model.SeqCache{s, d} {
				k, v, err := c.Slot(l, pos)
				if err != nil {
					t.Fatal(err)
				}
				copy(k, wk)
				copy(v, wv)
			}
		}
	}
	for l := range 2 {
		for n := 0; n <= 10; n++ {
			got, err := s.Spans(nil, l, n)
			if err != nil {
				t.Fatal(err)
			}
			if want := (n + 3) / 4; len(got) != want {
				t.Fatalf("layer %d n %d: %d spans, want one per page (%d)", l, n, len(got), want)
			}
			want, _ := d.Spans(nil, l, n)
			var flatK, flatV []float32
			for _, sp := range got {
				flatK, flatV = append(flatK, sp.K...), append(flatV, sp.V...)
			}
			if !equal(flatK, want[0].K) || !equal(flatV, want[0].V) {
				t.Fatalf("layer %d n %d: paged spans differ from the dense cache", l, n)
			}
		}
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestAllocAllOrNothing(t *testing.T) {
	p := testPool(t, 4, ScrubPoison)
	if _, err := p.Alloc(Owner{"a", 1}, 8); err != nil {
		t.Fatal(err)
	}
	_, err := p.Alloc(Owner{"a", 2}, 13)
	var full *PoolFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrPoolFull) {
		t.Fatalf("Alloc past capacity: %v, want *PoolFullError", err)
	}
	if full.Need != 4 || full.Free != 2 || full.Pages != 4 {
		t.Fatalf("PoolFullError numbers %+v, want need 4, free 2 of 4", *full)
	}
	if st := p.Stats(); st.Free != 2 {
		t.Fatalf("failed Alloc changed the free count to %d", st.Free)
	}
	s, _ := p.Alloc(Owner{"a", 3}, 4)
	if err := s.Grow(12); !errors.Is(err, ErrPoolFull) || s.Cap() != 4 {
		t.Fatalf("Grow past capacity: err %v, cap %d; want ErrPoolFull and cap 4", err, s.Cap())
	}
}

func TestTenantQuota(t *testing.T) {
	p, err := NewPool(PoolConfig{Pages: 8, PageSize: 4, Layers: 1, KVDim: 1, TenantPages: map[string]int{"small": 2}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Alloc(Owner{"small", 1}, 8)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Alloc(Owner{"small", 2}, 1)
	var q *QuotaError
	if !errors.As(err, &q) || q.Tenant != "small" || q.Used != 2 || q.Need != 1 || q.Limit != 2 {
		t.Fatalf("Alloc over quota: %v, want QuotaError small used 2 need 1 limit 2", err)
	}
	if _, err := p.Alloc(Owner{"big", 1}, 24); err != nil {
		t.Fatalf("an unlisted tenant is unlimited: %v", err)
	}
	s.Free()
	if _, err := p.Alloc(Owner{"small", 3}, 8); err != nil {
		t.Fatalf("quota is given back on Free: %v", err)
	}
}

func TestStaleEntryFailsAndCounts(t *testing.T) {
	p := testPool(t, 2, ScrubPoison)
	a, _ := p.Alloc(Owner{"a", 1}, 8)
	writeAll(t, a, 8, 1)
	stale := forge(a, nil)
	a.Free()
	if _, err := a.Spans(nil, 0, 1); !errors.Is(err, ErrFreed) {
		t.Fatalf("Spans after Free: %v, want ErrFreed", err)
	}
	// The freed page sits on the free list, scrubbed, at a new generation.
	dst := []model.Span{{}}
	got, err := stale.Spans(dst, 0, 8)
	if !errors.Is(err, ErrOwnership) || len(got) != 1 {
		t.Fatalf("stale Spans over free pages: %d spans, err %v; want ErrOwnership and no data", len(got), err)
	}
	// Reuse by another tenant: the stale entry still fails, before and
	// after the new owner writes.
	b, _ := p.Alloc(Owner{"b", 2}, 8)
	writeAll(t, b, 8, 500)
	if _, _, err := stale.Slot(1, 5); !errors.Is(err, ErrOwnership) {
		t.Fatalf("stale Slot over a reused page: %v, want ErrOwnership", err)
	}
	buf := make([]float32, 3)
	if err := stale.ReadTokens(0, 0, 1, buf, buf); !errors.Is(err, ErrOwnership) {
		t.Fatalf("stale ReadTokens: %v, want ErrOwnership", err)
	}
	other := forge(b, &Owner{"a", 1})
	if _, err := other.Spans(nil, 0, 4); !errors.Is(err, ErrOwnership) {
		t.Fatalf("Spans under the wrong owner: %v, want ErrOwnership", err)
	}
	if v := p.Stats().Violations; v != 4 {
		t.Fatalf("violations = %d, want 4 (one per failed check)", v)
	}
}

func TestPoisonNamesPreviousOwner(t *testing.T) {
	p := testPool(t, 1, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 0xDEADBEEFCAFE}, 4)
	writeAll(t, s, 4, 7)
	s.Free()
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{0, 1, 5, 17} {
		req, ok := PoisonRequest(p.k[off:])
		if !ok || req != 0xDEADBEEFCAFE {
			t.Fatalf("PoisonRequest at float %d = %#x, %v; want 0xdeadbeefcafe", off, req, ok)
		}
		if !math.IsNaN(float64(p.v[off])) {
			t.Fatalf("poison at float %d is %v, want NaN", off, p.v[off])
		}
	}
	if _, ok := PoisonRequest([]float32{1, 2, 3, 4}); ok {
		t.Fatal("PoisonRequest accepted ordinary floats")
	}
}

func TestScrubModes(t *testing.T) {
	for _, mode := range []ScrubMode{ScrubZero, ScrubOff} {
		p := testPool(t, 1, mode)
		s, _ := p.Alloc(Owner{"a", 1}, 4)
		writeAll(t, s, 4, 3)
		s.Free()
		err := p.CheckScrubbed()
		if (err == nil) != (mode == ScrubZero) {
			t.Fatalf("%v: CheckScrubbed = %v", mode, err)
		}
		if want := uint64(0); mode == ScrubZero {
			if p.Stats().Scrubs != 1 {
				t.Fatalf("zero scrub not counted")
			}
		} else if p.Stats().Scrubs != want {
			t.Fatalf("ScrubOff counted a scrub")
		}
	}
}

func TestLeaseDefersFree(t *testing.T) {
	p := testPool(t, 2, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 1}, 8)
	writeAll(t, s, 8, 10)
	l, err := s.Lease()
	if err != nil {
		t.Fatal(err)
	}
	s.Free()
	if st := p.Stats(); st.Pending != 2 || st.Free != 0 || st.Leases != 1 {
		t.Fatalf("after Free under lease: %+v, want 2 pending, 0 free", st)
	}
	if _, err := p.Alloc(Owner{"b", 2}, 1); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("a leased page was handed out again: %v", err)
	}
	k, v := make([]float32, 8*3), make([]float32, 8*3)
	if err := l.ReadTokens(1, 0, 8, k, v); err != nil {
		t.Fatal(err)
	}
	for pos := range 8 {
		wk, wv := fill(3, 10+uint32(pos))
		if !equal(k[pos*3:pos*3+3], wk) || !equal(v[pos*3:pos*3+3], wv) {
			t.Fatalf("lease read of position %d differs from what was written", pos)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); !errors.Is(err, ErrReleased) {
		t.Fatalf("second Release: %v, want ErrReleased", err)
	}
	if st := p.Stats(); st.Free != 2 || st.Pending != 0 {
		t.Fatalf("after the lease drained: %+v, want all free", st)
	}
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
}

func TestUnwrittenPositionsAreNotReadable(t *testing.T) {
	p := testPool(t, 4, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 1}, 12)
	k, v := fill(3*2, 1)
	// Positions 4..5 arrive before 0..3, as reordered transfer frames might.
	if err := s.WriteTokens(0, 4, 6, k, v); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Spans(nil, 0, 1); !errors.Is(err, ErrRange) {
		t.Fatalf("Spans over a gap: %v, want ErrRange", err)
	}
	big := make([]float32, 4*3)
	if err := s.WriteTokens(0, 0, 4, big, big); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Spans(nil, 0, 6); err != nil {
		t.Fatalf("Spans once contiguous: %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d with layer 1 unwritten, want 0", s.Len())
	}
	if err := s.WriteTokens(0, 10, 13, big, big); !errors.Is(err, ErrRange) {
		t.Fatalf("WriteTokens past capacity: %v", err)
	}
	if err := s.WriteTokens(2, 0, 1, big, big); !errors.Is(err, ErrRange) {
		t.Fatalf("WriteTokens to layer 2 of 2: %v", err)
	}
}

func TestReadWriteTokensAcrossPages(t *testing.T) {
	p := testPool(t, 8, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 1}, 14)
	n := 14
	in := make([]float32, n*3)
	for i := range in {
		in[i] = float32(i) + 0.5
	}
	for l := range 2 {
		if err := s.WriteTokens(l, 0, n, in, in); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float32, 7*3)
	if err := s.ReadTokens(1, 3, 10, out, out[:]); err != nil {
		t.Fatal(err)
	}
	if !equal(out, in[3*3:10*3]) {
		t.Fatal("ReadTokens [3,10) differs from what WriteTokens stored")
	}
	if err := s.ReadTokens(1, 3, 15, out, out); !errors.Is(err, ErrRange) {
		t.Fatalf("ReadTokens past the written run: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	p := testPool(t, 4, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 1}, 16)
	writeAll(t, s, 16, 1)
	s.Truncate(5)
	if s.Cap() != 8 || s.Len() != 5 || p.Stats().Free != 2 {
		t.Fatalf("Truncate(5): cap %d len %d free %d, want 8, 5, 2", s.Cap(), s.Len(), p.Stats().Free)
	}
	if _, err := s.Spans(nil, 0, 6); !errors.Is(err, ErrRange) {
		t.Fatalf("position 5 readable after Truncate(5): %v", err)
	}
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
}

func TestSharedPrefixPages(t *testing.T) {
	p := testPool(t, 6, ScrubPoison)
	a, _ := p.Alloc(Owner{"a", 1}, 10)
	writeAll(t, a, 10, 100)
	if _, err := a.SharePage(2, Owner{"ns", 1}); !errors.Is(err, ErrRange) {
		t.Fatalf("sharing a partial page: %v, want ErrRange", err)
	}
	r0, err := a.SharePage(0, Owner{"ns", 7})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := a.SharePage(1, Owner{"ns", 8})
	if r0.Owner() != (Owner{"ns", 7}) {
		t.Fatalf("ref owner %+v", r0.Owner())
	}
	if st := p.Stats(); st.Shared != 2 || st.TenantPages["ns"] != 2 || st.TenantPages["a"] != 1 {
		t.Fatalf("after sharing two pages: %+v", st)
	}
	if _, _, err := a.Slot(0, 3); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("writing a shared page: %v, want ErrReadOnly", err)
	}
	b, err := p.AllocWithPrefix(Owner{"b", 2}, []PageRef{r0, r1}, 12)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 8 || b.Cap() != 12 {
		t.Fatalf("prefix seq len %d cap %d, want 8, 12", b.Len(), b.Cap())
	}
	spans, err := b.Spans(nil, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	for pos := range 8 {
		wk, _ := fill(3, 100+uint32(pos))
		if got := spans[pos/4].K[pos%4*3 : pos%4*3+3]; !equal(got, wk) {
			t.Fatalf("prefix position %d reads %v, want %v", pos, got, wk)
		}
	}
	if err := b.WriteTokens(0, 7, 9, make([]float32, 6), make([]float32, 6)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteTokens into a shared page: %v", err)
	}
	a.Free()
	if err := p.Release(r0); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(r0); !errors.Is(err, ErrReleased) {
		t.Fatalf("releasing r0 twice: %v, want ErrReleased", err)
	}
	// b still holds both pages; dropping b and the last ref frees them.
	if st := p.Stats(); st.Shared != 2 {
		t.Fatalf("shared pages while b holds them: %d", st.Shared)
	}
	b.Free()
	if st := p.Stats(); st.Shared != 1 {
		t.Fatalf("shared pages with only r1 held: %d, want 1", st.Shared)
	}
	p.Release(r1)
	if _, err := p.AllocWithPrefix(Owner{"c", 3}, []PageRef{r1}, 4); !errors.Is(err, ErrOwnership) {
		t.Fatalf("attaching a freed prefix page: %v, want ErrOwnership", err)
	}
	if st := p.Stats(); st.Free != 6 || len(st.TenantPages) != 0 {
		t.Fatalf("leak: %+v", st)
	}
	if err := p.CheckScrubbed(); err != nil {
		t.Fatal(err)
	}
}

// TestStatsConcurrent reads Stats from another goroutine while the owner
// allocates; run with -race.
func TestStatsConcurrent(t *testing.T) {
	p := testPool(t, 16, ScrubPoison)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				if st := p.Stats(); st.Free+st.Owned+st.Shared+st.Pending != 16 {
					t.Errorf("inconsistent snapshot %+v", st)
					return
				}
			}
		}
	})
	for i := range 200 {
		s, err := p.Alloc(Owner{"a", uint64(i)}, 4*(i%8+1))
		if err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 4, uint32(i))
		s.Free()
	}
	close(stop)
	wg.Wait()
}

// TestSpansAreCapped checks that a span cannot be resliced past its end
// into the next page, which may belong to another tenant.
func TestSpansAreCapped(t *testing.T) {
	p := testPool(t, 4, ScrubPoison)
	s, _ := p.Alloc(Owner{"a", 1}, 6)
	writeAll(t, s, 6, 1)
	spans, err := s.Spans(nil, 0, 6)
	if err != nil {
		t.Fatal(err)
	}
	for i, sp := range spans {
		if cap(sp.K) != len(sp.K) || cap(sp.V) != len(sp.V) {
			t.Fatalf("span %d: len %d cap %d; a reslice would reach past the page", i, len(sp.K), cap(sp.K))
		}
	}
	k, _, _ := s.Slot(1, 5)
	if cap(k) != 3 {
		t.Fatalf("slot cap %d, want 3", cap(k))
	}
}

// TestHugeSizesDoNotWrap: a token count near the top of int must not wrap
// to a negative page count, which "fits" any pool. Alloc and Grow fail as
// pool full, saying how many tokens were asked for, and Truncate to such a
// size changes nothing.
func TestHugeSizesDoNotWrap(t *testing.T) {
	p, err := NewPool(PoolConfig{Pages: 4, PageSize: 3, Layers: 1, KVDim: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := p.Alloc(Owner{"a", 1}, math.MaxInt); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("Alloc(MaxInt): sequence of capacity %d, error %v; want pool full", s.Cap(), err)
	} else if want := "(9223372036854775809 tokens)"; !strings.Contains(err.Error(), want) {
		t.Errorf("Alloc(MaxInt): %q does not say %s", err, want)
	}
	s, err := p.Alloc(Owner{"a", 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Grow(math.MaxInt - 1); !errors.Is(err, ErrPoolFull) || s.Cap() != 3 {
		t.Fatalf("Grow(MaxInt-1): %v, capacity %d; want pool full and capacity 3", err, s.Cap())
	}
	if err := s.Grow(-1); !errors.Is(err, ErrRange) {
		t.Fatalf("Grow(-1): %v, want ErrRange", err)
	}
	s.Truncate(math.MaxInt)
	if s.Cap() != 3 {
		t.Fatalf("Truncate(MaxInt): capacity %d, want 3", s.Cap())
	}
	if st := p.Stats(); st.Free != 3 || st.Allocs != 1 {
		t.Fatalf("after huge requests: %+v, want 3 free pages and 1 allocation", st)
	}
}

// TestHugeSizeIsOverQuota: a tenant at its page quota asking for a size
// near the top of int is over quota (which holds back only that tenant),
// never merely "pool full" because the quota sum wrapped.
func TestHugeSizeIsOverQuota(t *testing.T) {
	p, err := NewPool(PoolConfig{Pages: 4, PageSize: 1, Layers: 1, KVDim: 2, TenantPages: map[string]int{"b": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Alloc(Owner{"b", 1}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Alloc(Owner{"b", 2}, math.MaxInt); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc(MaxInt) for a tenant holding 1 of its 2 pages: %v, want ErrQuota", err)
	}
}

// Freed holds one value after any number of frees, and none before.
func TestFreedSignals(t *testing.T) {
	p, err := NewPool(PoolConfig{Pages: 4, PageSize: 2, Layers: 1, KVDim: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Alloc(Owner{Tenant: "a", Request: 1}, 4)
	b, _ := p.Alloc(Owner{Tenant: "b", Request: 2}, 2)
	select {
	case <-p.Freed():
		t.Fatal("Freed signalled before anything was freed")
	default:
	}
	a.Free()
	b.Free()
	select {
	case <-p.Freed():
	default:
		t.Fatal("no Freed signal after two sequences were freed")
	}
	select {
	case <-p.Freed():
		t.Fatal("a second Freed value for frees already signalled")
	default:
	}
}

// Idle is true exactly while one SharePage hold is all that keeps a page:
// not while a sequence attaches it, not while a lease pins it, and not
// once the hold is released (the ref is then stale).
func TestIdle(t *testing.T) {
	p := testPool(t, 6, ScrubPoison)
	a, _ := p.Alloc(Owner{"a", 1}, 8)
	writeAll(t, a, 8, 100)
	r, err := a.SharePage(0, Owner{"ns", 7})
	if err != nil {
		t.Fatal(err)
	}
	if p.Idle(r) {
		t.Fatal("idle while the sequence that wrote it still holds it")
	}
	l, err := a.Lease()
	if err != nil {
		t.Fatal(err)
	}
	a.Free()
	if p.Idle(r) {
		t.Fatal("idle while a lease pins it")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if !p.Idle(r) {
		t.Fatal("not idle with only the shared hold left")
	}
	b, err := p.AllocWithPrefix(Owner{"b", 2}, []PageRef{r}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if p.Idle(r) {
		t.Fatal("idle while a sequence attaches it")
	}
	b.Free()
	if !p.Idle(r) {
		t.Fatal("not idle after the attaching sequence was freed")
	}
	if err := p.Release(r); err != nil {
		t.Fatal(err)
	}
	if p.Idle(r) || p.Idle(PageRef{page: -1}) || p.Idle(PageRef{page: 99}) {
		t.Fatal("a released or out-of-range ref reads as idle")
	}
}
