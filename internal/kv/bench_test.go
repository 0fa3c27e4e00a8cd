package kv

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// BenchmarkSpans512 reads 512 positions on 16-token pages: 32 tag checks
// per call. Compare with BenchmarkDenseSpans512, which checks nothing, to
// see what ownership checking costs per layer per token.
func BenchmarkSpans512(b *testing.B) {
	p, err := NewPool(PoolConfig{Pages: 64, PageSize: 16, Layers: 4, KVDim: 64})
	if err != nil {
		b.Fatal(err)
	}
	s, err := p.Alloc(Owner{"bench", 1}, 512)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]float32, 512*64)
	for l := range 4 {
		if err := s.WriteTokens(l, 0, 512, buf, buf); err != nil {
			b.Fatal(err)
		}
	}
	dst := make([]model.Span, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = s.Spans(dst[:0], 2, 512); err != nil || len(dst) != 32 {
			b.Fatal(err, len(dst))
		}
	}
}

func BenchmarkDenseSpans512(b *testing.B) {
	d := model.NewDenseCache(&model.Config{Layers: 4, KVHeads: 1, HeadDim: 64}, 512)
	dst := make([]model.Span, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = d.Spans(dst[:0], 2, 512)
	}
}

// BenchmarkAllocFree churns a 2k-token sequence through a pool; the
// scrub-mode sub-benchmarks show what scrubbing costs per page freed.
func BenchmarkAllocFree(b *testing.B) {
	for _, mode := range []ScrubMode{ScrubPoison, ScrubZero, ScrubOff} {
		b.Run(mode.String(), func(b *testing.B) {
			p, err := NewPool(PoolConfig{Pages: 256, PageSize: 16, Layers: 4, KVDim: 64, Scrub: mode})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var req uint64
			for b.Loop() {
				req++
				s, err := p.Alloc(Owner{"bench", req}, 2048)
				if err != nil {
					b.Fatal(err)
				}
				s.Free()
			}
			b.ReportMetric(128, "pages/op")
		})
	}
}

// BenchmarkTagCheck512 is the ownership check alone for the 32 pages of a
// 512-token sequence: the part of Spans that paging adds for isolation.
func BenchmarkTagCheck512(b *testing.B) {
	p, err := NewPool(PoolConfig{Pages: 64, PageSize: 16, Layers: 1, KVDim: 8})
	if err != nil {
		b.Fatal(err)
	}
	s, err := p.Alloc(Owner{"bench", 1}, 512)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := p.checkRange(s.table, 0, 512); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeal measures what keeping checksums costs a prefill server:
// sealing one layer of a 512-token prompt at the 110M shape (768 floats
// of K and of V per token), as the forward pass does after writing it.
// Against a forward pass at some 750 tokens/s here (docs/benchmarks.md),
// its MB/s says the share: 12 layers × 3 MiB per 512 tokens.
func BenchmarkSeal(b *testing.B) {
	const n, kvdim = 512, 768
	p, err := NewPool(PoolConfig{Pages: n / 16, PageSize: 16, Layers: 1, KVDim: kvdim, Checksums: true})
	if err != nil {
		b.Fatal(err)
	}
	s, _ := p.Alloc(Owner{"bench", 1}, n)
	buf := make([]float32, n*kvdim)
	if err := s.WriteTokens(0, 0, n, buf, buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(2 * n * kvdim * 4)
	for b.Loop() {
		if err := s.Seal(0, 0, n); err != nil {
			b.Fatal(err)
		}
	}
}
