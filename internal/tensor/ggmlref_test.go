package tensor

import (
	"encoding/hex"
	"math"
	"testing"
)

// Blocks whose bytes came from ggml's C reference quantisers (built with
// -ffp-contract=off): −22.5 and 7.499998 against a scale of 3 (1/3 is
// inexact) sit where rounding the product before adding 8.5 decides the
// Q4_0 level, and a block of +0 and −0 over 1 stores Q4_1 and Q5_1's min as
// +0, the first of the equal zeros.
func TestQuantizeKnownGGMLBlocks(t *testing.T) {
	ramp := make([]float32, 32)
	ramp[0], ramp[1], ramp[2] = -24, -22.5, math.Float32frombits(0x40effffc)
	zeros := make([]float32, 32)
	zeros[1], zeros[2], zeros[17] = float32(math.Copysign(0, -1)), 1, float32(math.Copysign(0, -1))
	for _, tc := range []struct {
		t    DType
		x    []float32
		want string
	}{
		{Q4_0, ramp, "004280818b88888888888888888888888888"},
		{Q8_0, zeros, "082000007f0000000000000000000000000000000000000000000000000000000000"},
		{Q4_0, zeros, "00b088888088888888888888888888888888"},
		{Q4_1, zeros, "442c000000000f00000000000000000000000000"},
		{Q5_0, zeros, "00acfbffffff00000000000000000000000000000000"},
		{Q5_1, zeros, "212800000400000000000f00000000000000000000000000"},
	} {
		got := make([]byte, tc.t.BlockBytes())
		if err := Quantize(tc.t, got, tc.x); err != nil {
			t.Fatal(err)
		}
		if h := hex.EncodeToString(got); h != tc.want {
			t.Errorf("%s of %v:\n got %s\nwant %s (ggml)", tc.t, tc.x[:3], h, tc.want)
		}
	}
}
