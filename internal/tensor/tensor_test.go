package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Every finite half converts to float32 and back unchanged, and float32
// values round to the nearest half (ties to even).
func TestF16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %04x came back as %04x", h, back)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("half %04x -> %v -> %04x", h, f, back)
		}
	}
	// 1 + 2^-11 is halfway between 1 and the next half: ties to even (1).
	if got := F32ToF16(1 + 1.0/2048); got != 0x3c00 {
		t.Errorf("tie rounded to %04x, want 3c00", got)
	}
	if got := F32ToF16(1 + 3.0/2048); got != 0x3c02 {
		t.Errorf("tie rounded to %04x, want 3c02", got)
	}
	if got := F32ToF16(70000); got != 0x7c00 {
		t.Errorf("overflow gave %04x, want +Inf", got)
	}
}

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {math.Float32frombits(0x3f808000), 0x3f80}, {math.Float32frombits(0x3f818000), 0x3f82}} {
		if got := F32ToBF16(c.in); got != c.want {
			t.Errorf("F32ToBF16(%v) = %04x, want %04x", c.in, got, c.want)
		}
		if back := BF16ToF32(c.want); F32ToBF16(back) != c.want {
			t.Errorf("bf16 %04x does not round-trip", c.want)
		}
	}
}

// Quantized types reconstruct within the error their format allows: half a
// step of the block's scale, plus the scale's own rounding to f16 (relative
// 2^-11) carried to the largest level.
func TestQuantizeErrorBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 32*64)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	src[5] = 0 // and an all-zero block
	for i := 32; i < 64; i++ {
		src[i] = 0
	}
	for _, c := range []struct {
		t     DType
		steps float32 // quantization levels on each side of zero
	}{{Q8_0, 127}, {Q4_0, 8}, {F16, 1024}, {BF16, 128}} {
		out := roundTrip(t, c.t, src)
		for b := 0; b < len(src)/32; b++ {
			var amax float32
			for _, v := range src[b*32 : b*32+32] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			tol := amax/c.steps*0.5 + amax/1024
			if c.t == Q4_0 {
				// Levels run from -8 to +7 steps: a value of the other
				// sign than the block's extreme clamps at 7, up to a whole
				// step away.
				tol = amax/c.steps + amax/1024
			}
			if c.t == F16 || c.t == BF16 {
				tol = amax / c.steps
			}
			for i := b * 32; i < b*32+32; i++ {
				if d := float32(math.Abs(float64(out[i] - src[i]))); d > tol*1.01+1e-7 {
					t.Fatalf("%s: element %d is %v, was %v (error %v, block bound %v)", c.t, i, out[i], src[i], d, tol)
				}
			}
		}
	}
}

func TestRowBytesAndParse(t *testing.T) {
	if n, err := Q8_0.RowBytes(64); err != nil || n != 68 {
		t.Fatalf("Q8_0.RowBytes(64) = %d, %v", n, err)
	}
	if _, err := Q4_0.RowBytes(33); err == nil {
		t.Fatal("Q4_0 accepted 33 elements")
	}
	if _, err := DType(99).RowBytes(32); err == nil {
		t.Fatal("unknown type accepted")
	}
	if d, err := ParseDType("q8_0"); err != nil || d != Q8_0 {
		t.Fatalf("ParseDType(q8_0) = %v, %v", d, err)
	}
	if Q8_K.Computable() || !Q8_K.Known() || !Q3_K.Computable() || !Q8_0.Computable() {
		t.Fatal("Known/Computable wrong for Q8_K, Q3_K or Q8_0")
	}
}

// roundTrip quantises x to dt and decodes it back.
func roundTrip(t testing.TB, dt DType, x []float32) []float32 {
	t.Helper()
	nb, err := dt.RowBytes(len(x))
	if err != nil {
		t.Fatal(err)
	}
	enc := make([]byte, nb)
	if err := Quantize(dt, enc, x); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(dt, y, enc); err != nil {
		t.Fatal(err)
	}
	return y
}
