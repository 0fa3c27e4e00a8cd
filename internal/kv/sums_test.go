package kv

import (
	"errors"
	"hash/crc32"
	"testing"
)

// TestKeptSums checks what a lease reports of the checksums a pool keeps:
// the CRC32C of each vector once sealed (by Seal after Slot, or by
// WriteTokens); nothing for a range holding a vector lent for writing
// since, until it is sealed again; nothing from a pool without Checksums.
// Seal refuses positions never written and shared prefix pages.
func TestKeptSums(t *testing.T) {
	const n, kvdim = 10, 8
	for _, keep := range []bool{true, false} {
		p, err := NewPool(PoolConfig{Pages: 8, PageSize: 4, Layers: 2, KVDim: kvdim, Checksums: keep})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := p.Alloc(Owner{Tenant: "a", Request: 1}, n)
		for pos := range n {
			k, v, err := s.Slot(0, pos)
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				k[i], v[i] = float32(pos*100+i), -float32(pos*100+i)
			}
		}
		buf := make([]float32, n*kvdim)
		for i := range buf {
			buf[i] = float32(i)
		}
		if err := s.WriteTokens(1, 0, n, buf, buf); err != nil {
			t.Fatal(err)
		}
		lease, _ := s.Lease()
		k, v := make([]uint32, n), make([]uint32, n)
		if lease.Sums(0, 0, n, k, v) {
			t.Fatal("Sums before Seal")
		}
		if err := s.Seal(0, 0, n); err != nil {
			t.Fatal(err)
		}
		for layer := range 2 {
			if ok := lease.Sums(layer, 0, n, k, v); ok != keep {
				t.Fatalf("checksums kept %v: layer %d Sums = %v", keep, layer, ok)
			}
			if !keep {
				continue
			}
			spans, _ := lease.Spans(nil, layer, n)
			pos := 0
			for _, sp := range spans {
				for i := 0; i < len(sp.K)/kvdim; i, pos = i+1, pos+1 {
					if k[pos] != crc32.Checksum(wordBytes(sp.K[i*kvdim:(i+1)*kvdim]), castagnoli) ||
						v[pos] != crc32.Checksum(wordBytes(sp.V[i*kvdim:(i+1)*kvdim]), castagnoli) {
						t.Fatalf("layer %d position %d: kept checksums are not its vectors' CRC32C", layer, pos)
					}
				}
			}
		}
		if !keep {
			continue
		}
		s.Slot(0, 5) // lent for writing again
		if lease.Sums(0, 4, 8, k, v) || !lease.Sums(0, 0, 4, k, v) || !lease.Sums(0, 8, n, k, v) {
			t.Fatal("a vector lent for writing kept its checksum, or its neighbours lost theirs")
		}
		if err := s.Seal(0, 5, 6); err != nil || !lease.Sums(0, 0, n, k, v) {
			t.Fatalf("sealed again: %v", err)
		}
		if err := s.Seal(0, 0, n+1); !errors.Is(err, ErrRange) {
			t.Fatalf("Seal past the written positions: %v", err)
		}
		ref, err := s.SharePage(0, Owner{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		s2, err := p.AllocWithPrefix(Owner{Tenant: "a", Request: 2}, []PageRef{ref}, 6)
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Seal(0, 0, 4); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Seal of a shared prefix page: %v", err)
		}
		lease.Release()
		if lease.Sums(0, 0, n, k, v) {
			t.Fatal("Sums through a released lease")
		}
	}
}
