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
