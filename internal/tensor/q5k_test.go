package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// handQ5K is a Q5_K block with d = 1, dmin = 0.5, Q4_K's hand-built scales
// (q4kPacked), qh[i] = 23i+5 and qs[i] = 37i+11 (mod 256).
func handQ5K() []byte {
	b := make([]byte, Q5KBytes)
	binary.LittleEndian.PutUint16(b[0:], 0x3c00) // 1.0
	binary.LittleEndian.PutUint16(b[2:], 0x3800) // 0.5
	copy(b[4:16], q4kPacked[:])
	for i := 0; i < 32; i++ {
		b[16+i] = byte(i*23 + 5)
	}
	for i := 0; i < 128; i++ {
		b[48+i] = byte(i*37 + 11)
	}
	return b
}

// ggmlQ5K decodes like dequantize_row_q5_K, loop for loop.
func ggmlQ5K(b []byte) []float32 {
	d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
	mn := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	scales, qh, ql := b[4:16], b[16:48], b[48:176]
	var y []float32
	is := 0
	u1, u2 := uint8(1), uint8(2)
	for j := 0; j < 256; j += 64 {
		sc, m := ggmlScaleMinK4(is+0, scales)
		d1, m1 := d*float32(sc), mn*float32(m)
		sc, m = ggmlScaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), mn*float32(m)
		for l := 0; l < 32; l++ {
			h := uint8(0)
			if qh[l]&u1 != 0 {
				h = 16
			}
			y = append(y, float32(d1*float32((ql[l]&0xF)+h))-m1)
		}
		for l := 0; l < 32; l++ {
			h := uint8(0)
			if qh[l]&u2 != 0 {
				h = 16
			}
			y = append(y, float32(d2*float32((ql[l]>>4)+h))-m2)
		}
		ql = ql[32:]
		is += 2
		u1 <<= 2
		u2 <<= 2
	}
	return y
}

func TestDequantizeQ5KHandBuilt(t *testing.T) {
	b := handQ5K()
	got := make([]float32, 256)
	if err := Dequantize(Q5_K, got, b); err != nil {
		t.Fatal(err)
	}
	want := ggmlQ5K(b)
	for e := range got {
		if got[e] != want[e] {
			t.Fatalf("element %d = %v, ggml's decoder gives %v", e, got[e], want[e])
		}
	}
	// Element 0: low nibble of qs[0] (11) plus bit 0 of qh[0] (5 → 1):
	// q = 27, 1·1·27 − 0.5·0. Element 64: low nibble of qs[32] (1195 mod
	// 256 = 0xab → 11) plus bit 2 of qh[0] (1): 1·3·27 − 0.5·63. Element
	// 255: high nibble of qs[127] (0x66 → 6) plus bit 7 of qh[31] (206 →
	// 1): q = 22, 1·60·22 − 0.5·62.
	for e, v := range map[int]float32{0: 27, 1: 0, 31: 6, 32: -2.5, 33: 3.5, 64: 49.5, 100: 184,
		130: 346.5, 191: 379, 200: 120.5, 255: 1289} {
		if got[e] != v {
			t.Errorf("element %d = %v, want %v", e, got[e], v)
		}
	}
}

// Every element's fifth bit alone: a block whose quants are all 0 but one,
// which is 16, decodes to d·sc·16 − dmin·m at that element only. This
// pins which qh bit belongs to which element, one element at a time.
func TestQ5KHighBitOrder(t *testing.T) {
	for e := 0; e < 256; e++ {
		var qv [KBlock]uint8
		qv[e] = 16
		var b [Q5KBytes]byte
		binary.LittleEndian.PutUint16(b[0:], 0x3c00)
		copy(b[4:16], q4kPacked[:])
		fillQ5K(&b, &qv)
		c, r := e/64, e%64
		if bit := b[16+r%32] >> (2*c + r/32) & 1; bit != 1 {
			t.Fatalf("element %d: bit %d of qh[%d] not set (qh %v)", e, 2*c+r/32, r%32, b[16:48])
		}
		want := ggmlQ5K(b[:])
		for i := range qv {
			if q := q5KQuant(&b, i); q != qv[i] {
				t.Fatalf("element %d set: q5KQuant(%d) = %d, want %d", e, i, q, qv[i])
			}
			if want[i] != float32(q4kSc[i/32])*float32(qv[i]) {
				t.Fatalf("element %d set: ggml decodes element %d as %v", e, i, want[i])
			}
		}
	}
}

func TestQ5KRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, scale := range []float64{1e-3, 0.02, 1, 300} {
		x := gauss(r, 256*16, scale)
		enc := make([]byte, 16*Q5KBytes)
		if err := Quantize(Q5_K, enc, x); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := Dequantize(Q5_K, y, enc); err != nil {
			t.Fatal(err)
		}
		var se, sx float64
		for i := range x {
			e := float64(y[i] - x[i])
			se += e * e
			sx += float64(x[i]) * float64(x[i])
		}
		// One bit more than Q4_K (bound 0.10) halves the step.
		rel := math.Sqrt(se / sx)
		t.Logf("scale %g: relative RMS error %.4f", scale, rel)
		if !(rel < 0.05) {
			t.Errorf("scale %g: relative RMS error %.4f, want < 0.05", scale, rel)
		}
		// Requantising the decoded values changes nothing: each value is
		// on a level of the stored scale and min.
		y2 := roundTrip(t, Q5_K, y)
		var se2 float64
		for i := range y {
			e := float64(y2[i] - y[i])
			se2 += e * e
		}
		if rel2 := math.Sqrt(se2 / sx); rel2 > rel/2 {
			t.Errorf("scale %g: requantising costs %.4f, the first pass %.4f", scale, rel2, rel)
		}
	}
}

func TestQ5KSpecialBlocks(t *testing.T) {
	cases := map[string]func(i int) float32{
		"zero":     func(int) float32 { return 0 },
		"positive": func(i int) float32 { return 1 + float32(i%5) },
		"negative": func(i int) float32 { return -2 - float32(i%3) },
		"constant": func(int) float32 { return 0.75 },
		"ramp":     func(i int) float32 { return float32(i%32) - 8 },
		"nan":      func(i int) float32 { return map[bool]float32{true: float32(math.NaN()), false: 1}[i == 7] },
		"inf":      func(i int) float32 { return map[bool]float32{true: float32(math.Inf(1)), false: 1}[i == 7] },
	}
	for name, f := range cases {
		x := make([]float32, 256)
		for i := range x {
			x[i] = f(i)
		}
		y := roundTrip(t, Q5_K, x)
		if name == "nan" || name == "inf" {
			continue // only: no panic
		}
		for i := range x {
			if d := math.Abs(float64(y[i] - x[i])); d > 0.2 {
				t.Errorf("%s: element %d decodes to %v, was %v", name, i, y[i], x[i])
				break
			}
		}
	}
}

func TestQ5KBadLengths(t *testing.T) {
	if err := Quantize(Q5_K, make([]byte, Q5KBytes), make([]float32, 255)); err == nil {
		t.Error("quantizing 255 values did not fail")
	}
	if err := Quantize(Q5_K, make([]byte, Q5KBytes-1), make([]float32, 256)); err == nil {
		t.Error("quantizing into 175 bytes did not fail")
	}
	if err := Dequantize(Q5_K, make([]float32, 512), make([]byte, Q5KBytes)); err == nil {
		t.Error("dequantizing 512 values from one block did not fail")
	}
	if n, err := Q5_K.RowBytes(768); err != nil || n != 3*Q5KBytes {
		t.Errorf("RowBytes(768) = %d, %v", n, err)
	}
	if !Q5_K.Computable() || Q5_K.BlockBytes() != Q5KBytes || Q5_K.String() != "Q5_K" {
		t.Errorf("Q5_K: computable %v, %d bytes, name %s", Q5_K.Computable(), Q5_K.BlockBytes(), Q5_K)
	}
	if typ, err := ParseDType("q5_k"); err != nil || typ != Q5_K {
		t.Errorf(`ParseDType("q5_k") = %v, %v`, typ, err)
	}
}
