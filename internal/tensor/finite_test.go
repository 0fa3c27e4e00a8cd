package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// FirstNonFinite finds an infinite or NaN float16 scale or min in any
// block (the value index is the block's first element) and a non-finite
// plain value, and passes blocks quantised from finite values.
func TestFirstNonFinite(t *testing.T) {
	x := make([]float32, 2*KBlock)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) - 0.25
	}
	for dt, fields := range scaleFields {
		n, _ := dt.RowBytes(len(x))
		data := make([]byte, n)
		if err := Quantize(dt, data, x); err != nil {
			t.Fatal(err)
		}
		if i := FirstNonFinite(dt, data, len(x)); i != -1 {
			t.Errorf("%s: finite block reported at %d", dt, i)
		}
		for _, off := range fields {
			for _, bad := range []uint16{0x7c00, 0xfe00} { // +Inf, a NaN
				blk := append([]byte(nil), data...)
				binary.LittleEndian.PutUint16(blk[dt.BlockBytes()+off:], bad)
				if i := FirstNonFinite(dt, blk, len(x)); i != dt.BlockSize() {
					t.Errorf("%s: field at %d = %#x reported at %d, want %d", dt, off, bad, i, dt.BlockSize())
				}
			}
		}
	}
	for _, dt := range []DType{F32, F16, BF16} {
		vals := []float32{1, -2, 65504, float32(math.Inf(1)), 3}
		if dt == BF16 {
			vals[3] = float32(math.NaN())
		}
		data := make([]byte, len(vals)*dt.BlockBytes())
		if err := Quantize(dt, data, vals); err != nil {
			t.Fatal(err)
		}
		if i := FirstNonFinite(dt, data, len(vals)); i != 3 {
			t.Errorf("%s: got %d, want 3", dt, i)
		}
	}
}
