package kv

import (
	"errors"
	"slices"
	"testing"
)

// TestLeaseSpans checks that a lease lends the pages it pins as Seq.Spans
// does: the same values as ReadTokens, capped per page, refused past the
// leased length and after Release.
func TestLeaseSpans(t *testing.T) {
	const kd, n = 4, 11
	p, err := NewPool(PoolConfig{Pages: 8, PageSize: 4, Layers: 2, KVDim: kd})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Alloc(Owner{Tenant: "a", Request: 1}, n)
	k, v := make([]float32, n*kd), make([]float32, n*kd)
	for l := range 2 {
		for i := range k {
			k[i], v[i] = float32(l*1000+i), -float32(l*1000+i)
		}
		if err := s.WriteTokens(l, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := s.Lease()
	if err != nil {
		t.Fatal(err)
	}
	s.Free() // the lease still pins the pages
	for l := range 2 {
		spans, err := lease.Spans(nil, l, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != 3 {
			t.Fatalf("layer %d: %d spans over %d tokens of 4-token pages", l, len(spans), n)
		}
		var gotK, gotV []float32
		for _, sp := range spans {
			if cap(sp.K) != len(sp.K) {
				t.Fatal("span not capped at its page")
			}
			gotK, gotV = append(gotK, sp.K...), append(gotV, sp.V...)
		}
		if err := lease.ReadTokens(l, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gotK, k) || !slices.Equal(gotV, v) {
			t.Fatalf("layer %d: spans differ from ReadTokens", l)
		}
	}
	if _, err := lease.Spans(nil, 0, n+1); !errors.Is(err, ErrRange) {
		t.Fatalf("past the lease: %v", err)
	}
	if _, err := lease.Spans(nil, 2, n); !errors.Is(err, ErrRange) {
		t.Fatalf("layer out of range: %v", err)
	}
	lease.Release()
	if _, err := lease.Spans(nil, 0, n); !errors.Is(err, ErrReleased) {
		t.Fatalf("after Release: %v", err)
	}
}

// TestSpansRange checks that SpansRange lends exactly the pages and
// offsets Spans does for a range, whatever order positions were written
// in, and refuses a range with an unwritten position.
func TestSpansRange(t *testing.T) {
	const kd = 3
	p, err := NewPool(PoolConfig{Pages: 8, PageSize: 4, Layers: 2, KVDim: kd})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Alloc(Owner{Tenant: "a", Request: 1}, 14)
	k, v := make([]float32, 14*kd), make([]float32, 14*kd)
	for i := range k {
		k[i], v[i] = float32(i), -float32(i)
	}
	// Tokens [5, 11) of layer 1 first: not contiguous from 0.
	if err := s.WriteTokens(1, 5, 11, k[5*kd:11*kd], v[5*kd:11*kd]); err != nil {
		t.Fatal(err)
	}
	spans, err := s.SpansRange(nil, 1, 5, 11)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || len(spans[0].K) != 3*kd || len(spans[1].K) != 3*kd {
		t.Fatalf("tokens [5, 11) over 4-token pages: %d spans", len(spans))
	}
	var gotK, gotV []float32
	for _, sp := range spans {
		if cap(sp.K) != len(sp.K) || cap(sp.V) != len(sp.V) {
			t.Fatal("span not capped at the range")
		}
		gotK, gotV = append(gotK, sp.K...), append(gotV, sp.V...)
	}
	if !slices.Equal(gotK, k[5*kd:11*kd]) || !slices.Equal(gotV, v[5*kd:11*kd]) {
		t.Fatal("SpansRange differs from what was written")
	}
	for _, r := range [][2]int{{4, 11}, {5, 12}} {
		if _, err := s.SpansRange(nil, 1, r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Fatalf("[%d, %d) with an unwritten position: %v", r[0], r[1], err)
		}
	}
	if _, err := s.SpansRange(nil, 0, 5, 6); !errors.Is(err, ErrRange) {
		t.Fatalf("unwritten layer: %v", err)
	}
	// Once [0, 11) is written, the range's spans are the tails of Spans'.
	if err := s.WriteTokens(1, 0, 5, k, v); err != nil {
		t.Fatal(err)
	}
	full, _ := s.Spans(nil, 1, 11)
	spans, _ = s.SpansRange(spans[:0], 1, 5, 11)
	if &spans[0].K[0] != &full[1].K[kd] || &spans[1].V[0] != &full[2].V[0] {
		t.Fatal("SpansRange lends other memory than Spans for the same positions")
	}
	s.Free()
	if _, err := s.SpansRange(nil, 1, 0, 4); !errors.Is(err, ErrFreed) {
		t.Fatalf("after Free: %v", err)
	}
}

// TestLeaseLive checks that Live turns false at Release and only then.
func TestLeaseLive(t *testing.T) {
	p, _ := NewPool(PoolConfig{Pages: 2, PageSize: 4, Layers: 1, KVDim: 2})
	s, _ := p.Alloc(Owner{Tenant: "a", Request: 1}, 4)
	lease, err := s.Lease()
	if err != nil {
		t.Fatal(err)
	}
	s.Free()
	if !lease.Live() {
		t.Fatal("lease not live before Release")
	}
	lease.Release()
	if lease.Live() {
		t.Fatal("lease live after Release")
	}
}
