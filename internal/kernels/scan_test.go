package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Scan must find a -128 weight anywhere in a Q8_0 matrix on both paths,
// and a scanned matrix must multiply to the same bits as an unscanned one.
func TestScanFindsMinAndChangesNoResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		withPath(simd, func() {
			w, _ := randMatrix(t, rng, tensor.Q8_0, 300, 768)
			w.Scan()
			if !w.minFree {
				t.Fatalf("simd=%v: a matrix quantised from floats (no -128) was not found free of it", simd)
			}
			for _, at := range []int{2, 33, 34*24*150 + 2 + 31, len(w.Data) - 1} {
				v := *w
				v.Data = append([]byte(nil), w.Data...)
				v.Data[at] = 0x80
				v.Scan()
				if v.minFree {
					t.Fatalf("simd=%v: a -128 at byte %d went unseen", simd, at)
				}
			}
			x := randFloats(rng, 16*768)
			p := NewPool(2)
			defer p.Close()
			got, want := make([]float32, 16*300), make([]float32, 16*300)
			p.MatMul(got, w, x, 16)
			plain := *w
			plain.minFree = false
			p.MatMul(want, &plain, x, 16)
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("simd=%v: scanned matrix value %d = %v, unscanned %v", simd, i, got[i], want[i])
			}
		})
	}
}
