package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The hand-built blocks below follow ggml's reference decoders loop for
// loop (dequantize_row_q4_K, dequantize_row_q6_K, get_scale_min_k4), written
// here independently of kquant.go; the literal values were computed by hand
// from the same bytes. A decoder that reads a nibble, a half or a scale
// from the wrong place fails them.

var (
	q4kSc = [8]uint8{1, 2, 3, 63, 17, 33, 48, 60}
	q4kM  = [8]uint8{0, 5, 63, 10, 21, 34, 47, 62}
	// q4kPacked is q4kSc and q4kM packed as ggml's quantize_row_q4_K_ref
	// packs them.
	q4kPacked = [12]byte{65, 130, 195, 255, 64, 133, 191, 202, 81, 33, 240, 236}
)

// handQ4K is a Q4_K block with d = 1, dmin = 0.5, the scales above and
// qs[i] = 37i+11 (mod 256).
func handQ4K() []byte {
	b := make([]byte, Q4KBytes)
	binary.LittleEndian.PutUint16(b[0:], 0x3c00) // 1.0
	binary.LittleEndian.PutUint16(b[2:], 0x3800) // 0.5
	copy(b[4:16], q4kPacked[:])
	for i := 0; i < 128; i++ {
		b[16+i] = byte(i*37 + 11)
	}
	return b
}

// ggmlScaleMinK4 is ggml's get_scale_min_k4, transcribed as written, for
// the reference decoders of Q4_K and Q5_K.
func ggmlScaleMinK4(j int, q []byte) (uint8, uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j-0] >> 6) << 4)
}

// ggmlQ4K decodes like dequantize_row_q4_K.
func ggmlQ4K(b []byte) []float32 {
	d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
	mn := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	scales, q := b[4:16], b[16:]
	var y []float32
	is := 0
	for j := 0; j < 256; j += 64 {
		sc, m := ggmlScaleMinK4(is+0, scales)
		d1, m1 := d*float32(sc), mn*float32(m)
		sc, m = ggmlScaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), mn*float32(m)
		for l := 0; l < 32; l++ {
			y = append(y, float32(d1*float32(q[l]&0xF))-m1)
		}
		for l := 0; l < 32; l++ {
			y = append(y, float32(d2*float32(q[l]>>4))-m2)
		}
		q = q[32:]
		is += 2
	}
	return y
}

func TestUnpackQ4KScales(t *testing.T) {
	sc, m := UnpackQ4KScales(&q4kPacked)
	if sc != q4kSc || m != q4kM {
		t.Fatalf("unpacked scales %v mins %v, want %v %v", sc, m, q4kSc, q4kM)
	}
	var p [12]byte
	packQ4KScales(&p, &q4kSc, &q4kM)
	if p != q4kPacked {
		t.Fatalf("packed %v, want %v", p, q4kPacked)
	}
}

func TestDequantizeQ4KHandBuilt(t *testing.T) {
	b := handQ4K()
	got := make([]float32, 256)
	if err := Dequantize(Q4_K, got, b); err != nil {
		t.Fatal(err)
	}
	want := ggmlQ4K(b)
	for e := range got {
		if got[e] != want[e] {
			t.Fatalf("element %d = %v, ggml's decoder gives %v", e, got[e], want[e])
		}
	}
	// Element 32 is the high nibble of qs[0] (11 → 0) in sub-block 1:
	// 1·2·0 − 0.5·5. Element 100 is the high nibble of qs[36] (1343 mod 256
	// = 63 → 3) in sub-block 3: 1·63·3 − 0.5·10.
	for e, v := range map[int]float32{0: 11, 1: 0, 31: 6, 32: -2.5, 33: 3.5, 40: 3.5, 100: 184, 130: 74.5, 200: 120.5, 255: 329} {
		if got[e] != v {
			t.Errorf("element %d = %v, want %v", e, got[e], v)
		}
	}
}

// handQ6K is a Q6_K block with d = 0.25, the scales below, ql[i] = 53i+7
// and qh[i] = 29i+3 (mod 256).
var q6kScales = [16]int8{1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -127, -128, 127}

func handQ6K() []byte {
	b := make([]byte, Q6KBytes)
	for i := 0; i < 128; i++ {
		b[i] = byte(i*53 + 7)
	}
	for i := 0; i < 64; i++ {
		b[128+i] = byte(i*29 + 3)
	}
	for i, s := range q6kScales {
		b[192+i] = byte(s)
	}
	binary.LittleEndian.PutUint16(b[208:], 0x3400) // 0.25
	return b
}

// ggmlQ6K decodes like dequantize_row_q6_K.
func ggmlQ6K(b []byte) []float32 {
	d := F16ToF32(binary.LittleEndian.Uint16(b[208:]))
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	y := make([]float32, 256)
	out := y
	for n := 0; n < 256; n += 128 {
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int8((ql[l+0]&0xF)|((qh[l]>>0)&3)<<4) - 32
			q2 := int8((ql[l+32]&0xF)|((qh[l]>>2)&3)<<4) - 32
			q3 := int8((ql[l+0]>>4)|((qh[l]>>4)&3)<<4) - 32
			q4 := int8((ql[l+32]>>4)|((qh[l]>>6)&3)<<4) - 32
			out[l+0] = d * float32(int8(sc[is+0])) * float32(q1)
			out[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			out[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			out[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
		out = out[128:]
		ql, qh, sc = ql[64:], qh[32:], sc[8:]
	}
	return y
}

func TestDequantizeQ6KHandBuilt(t *testing.T) {
	b := handQ6K()
	got := make([]float32, 256)
	if err := Dequantize(Q6_K, got, b); err != nil {
		t.Fatal(err)
	}
	want := ggmlQ6K(b)
	for e := range got {
		if got[e] != want[e] {
			t.Fatalf("element %d = %v, ggml's decoder gives %v", e, got[e], want[e])
		}
	}
	// Element 64 is the high nibble of ql[0] (7 → 0) with bits 4-5 of
	// qh[0] (3 → 0): q = 0 − 32, scale index 4 (5): 0.25·5·−32 = −40.
	for e, v := range map[int]float32{0: 5.75, 1: -5, 16: -11.5, 31: -1, 32: -18.75, 50: -17, 64: -40,
		100: -15.75, 127: -2, 128: 51.75, 150: 27.5, 200: -58.5, 230: 448, 255: -857.25} {
		if got[e] != v {
			t.Errorf("element %d = %v, want %v", e, got[e], v)
		}
	}
}

// gauss fills n values of a normal distribution with the given scale, with
// a sprinkling of outliers as real weights have.
func gauss(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
		if i%97 == 0 {
			x[i] *= 4
		}
	}
	return x
}

func TestKQuantRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Bounds on RMS error relative to the RMS of the data, measured with
	// margin: 4 bits over a 32-element range (Q4_K), 6 bits over a
	// 16-element one (Q6_K), 3 and 2 bits over 16 elements (Q3_K about
	// 0.18, Q2_K about 0.35).
	for _, tc := range []struct {
		t     DType
		bound float64
	}{{Q4_K, 0.10}, {Q6_K, 0.03}, {Q3_K, 0.25}, {Q2_K, 0.40}} {
		for _, scale := range []float64{1e-3, 0.02, 1, 300} {
			x := gauss(r, 256*16, scale)
			y := roundTrip(t, tc.t, x)
			var se, sx float64
			for i := range x {
				e := float64(y[i] - x[i])
				se += e * e
				sx += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / sx)
			t.Logf("%s scale %g: relative RMS error %.4f", tc.t, scale, rel)
			if !(rel < tc.bound) {
				t.Errorf("%s scale %g: relative RMS error %.4f, want < %.2f", tc.t, scale, rel, tc.bound)
			}
		}
	}
}

func TestKQuantSpecialBlocks(t *testing.T) {
	cases := map[string]func(i int) float32{
		"zero":     func(int) float32 { return 0 },
		"positive": func(i int) float32 { return 1 + float32(i%5) },
		"negative": func(i int) float32 { return -2 - float32(i%3) },
		"constant": func(int) float32 { return 0.75 },
		"nan":      func(i int) float32 { return map[bool]float32{true: float32(math.NaN()), false: 1}[i == 7] },
		"inf":      func(i int) float32 { return map[bool]float32{true: float32(math.Inf(1)), false: 1}[i == 7] },
	}
	for _, dt := range []DType{Q4_K, Q6_K} {
		for name, f := range cases {
			x := make([]float32, 256)
			for i := range x {
				x[i] = f(i)
			}
			y := roundTrip(t, dt, x)
			if name == "nan" || name == "inf" {
				continue // only: no panic
			}
			for i := range x {
				// Worst case: a 6-bit scale one half-step off over a
				// range of 4 (Q4_K's min-max).
				if d := math.Abs(float64(y[i] - x[i])); d > 0.2 {
					t.Errorf("%s %s: element %d decodes to %v, was %v", dt, name, i, y[i], x[i])
					break
				}
			}
		}
	}
}

func TestKQuantBadLengths(t *testing.T) {
	for _, dt := range []DType{Q4_K, Q6_K} {
		bb := dt.BlockBytes()
		if err := Quantize(dt, make([]byte, bb), make([]float32, 255)); err == nil {
			t.Errorf("%s: quantizing 255 values did not fail", dt)
		}
		if err := Quantize(dt, make([]byte, bb-1), make([]float32, 256)); err == nil {
			t.Errorf("%s: quantizing into %d bytes did not fail", dt, bb-1)
		}
		if err := Dequantize(dt, make([]float32, 512), make([]byte, bb)); err == nil {
			t.Errorf("%s: dequantizing 512 values from one block did not fail", dt)
		}
		if err := Dequantize(dt, make([]float32, 100), make([]byte, bb)); err == nil {
			t.Errorf("%s: dequantizing 100 values did not fail", dt)
		}
		if err := Dequantize(dt, make([]float32, 256), nil); err == nil {
			t.Errorf("%s: dequantizing from no bytes did not fail", dt)
		}
		if n, err := dt.RowBytes(768); err != nil || n != 3*bb {
			t.Errorf("%s: RowBytes(768) = %d, %v", dt, n, err)
		}
		if !dt.Computable() {
			t.Errorf("%s is not computable", dt)
		}
	}
}
