package kernels

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// TestPeakMACs: the ceiling loops count what their rounds stand for, and
// nothing runs where there are no SIMD kernels to stand for.
func TestPeakMACs(t *testing.T) {
	for _, c := range []struct {
		t    tensor.DType
		want int64
	}{{tensor.Q8_0, 512}, {tensor.Q4_K, 512}, {tensor.F32, 128}, {tensor.F16, 128}} {
		want := 3 * c.want
		if !useSIMD {
			want = 0
		}
		if got := PeakMACs(c.t, 3); got != want {
			t.Errorf("PeakMACs(%s, 3) = %d, want %d", c.t, got, want)
		}
		if got := PeakMACs(c.t, 0); got != 0 {
			t.Errorf("PeakMACs(%s, 0) = %d, want 0", c.t, got)
		}
	}
}
