package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// handQ3K is a Q3_K block with d = 0.5, hmask[i] = 19i+7, qs[i] = 37i+11
// and scales[i] = 41i+3 (mod 256).
func handQ3K() []byte {
	b := make([]byte, Q3KBytes)
	for i := 0; i < 32; i++ {
		b[i] = byte(19*i + 7)
	}
	for i := 0; i < 64; i++ {
		b[32+i] = byte(37*i + 11)
	}
	for i := 0; i < 12; i++ {
		b[96+i] = byte(41*i + 3)
	}
	binary.LittleEndian.PutUint16(b[108:], 0x3800) // 0.5
	return b
}

// handQ2K is a Q2_K block with d = 0.5, dmin = 0.25, scales[i] = 41i+3
// and qs[i] = 37i+11 (mod 256).
func handQ2K() []byte {
	b := make([]byte, Q2KBytes)
	for i := 0; i < 16; i++ {
		b[i] = byte(41*i + 3)
	}
	for i := 0; i < 64; i++ {
		b[16+i] = byte(37*i + 11)
	}
	binary.LittleEndian.PutUint16(b[80:], 0x3800) // 0.5
	binary.LittleEndian.PutUint16(b[82:], 0x3400) // 0.25
	return b
}

// ggmlQ3KScale is scale is of a Q3_K block's packed bytes, written as
// ggml's CUDA dequantize_block_q3_K spells it, case by case.
func ggmlQ3KScale(is int, s []byte) int {
	var u byte
	switch {
	case is < 4:
		u = s[is]&0xF | (s[is+8]>>0&3)<<4
	case is < 8:
		u = s[is]&0xF | (s[is+4]>>2&3)<<4
	case is < 12:
		u = s[is-8]>>4 | (s[is]>>4&3)<<4
	default:
		u = s[is-8]>>4 | (s[is-4]>>6&3)<<4
	}
	return int(u) - 32
}

// ggmlQ3K decodes like dequantize_row_q3_K, loop for loop.
func ggmlQ3K(b []byte) []float32 {
	dAll := F16ToF32(binary.LittleEndian.Uint16(b[108:]))
	hm, q, scales := b[0:32], b[32:96], b[96:108]
	var y []float32
	is, m := 0, uint8(1)
	for n := 0; n < 256; n += 128 {
		shift := 0
		for j := 0; j < 4; j++ {
			for half := 0; half < 2; half++ {
				dl := dAll * float32(ggmlQ3KScale(is, scales))
				is++
				for l := 16 * half; l < 16*half+16; l++ {
					v := int(q[l]>>shift&3) - 4
					if hm[l]&m != 0 {
						v += 4
					}
					y = append(y, dl*float32(v))
				}
			}
			shift += 2
			m <<= 1
		}
		q = q[32:]
	}
	return y
}

// ggmlQ2K decodes like dequantize_row_q2_K, loop for loop.
func ggmlQ2K(b []byte) []float32 {
	d := F16ToF32(binary.LittleEndian.Uint16(b[80:]))
	mn := F16ToF32(binary.LittleEndian.Uint16(b[82:]))
	scales, q := b[0:16], b[16:80]
	var y []float32
	is := 0
	for n := 0; n < 256; n += 128 {
		for shift := 0; shift < 8; shift += 2 {
			for half := 0; half < 2; half++ {
				sc := scales[is]
				is++
				dl, ml := d*float32(sc&0xF), mn*float32(sc>>4)
				for l := 16 * half; l < 16*half+16; l++ {
					y = append(y, float32(dl*float32(q[l]>>shift&3))-ml)
				}
			}
		}
		q = q[32:]
	}
	return y
}

// The hand-built blocks decode as ggml's loops do, and two elements as
// worked out by hand from the bytes: Q3_K element 0 is qs[0] = 11 (low
// bits 3), hmask[0] = 7 (bit 0 set: no −4), scale 0 = (3 & 0xf) | (75 &
// 3)<<4 = 51, so 0.5·19·3 = 28.5; element 200 (half 1, shift 4, l = 8)
// is qs[40] = 211 (bits 4,5: 1), hmask[8] = 159 (bit 6 clear: −4), scale
// 12 = 167>>4 | (75>>6)<<4 = 26, so 0.5·(−6)·(−3) = 9. Q2_K element 0 is
// 0.5·3·3 − 0.25·0 = 4.5; element 200 has scales[12] = 0xef and quant 1:
// 0.5·15·1 − 0.25·14 = 4.
func TestDequantizeQ3KQ2KHandBuilt(t *testing.T) {
	for _, tc := range []struct {
		dt         DType
		blk        []byte
		ref        []float32
		at0, at200 float32
	}{
		{Q3_K, handQ3K(), ggmlQ3K(handQ3K()), 28.5, 9},
		{Q2_K, handQ2K(), ggmlQ2K(handQ2K()), 4.5, 4},
	} {
		y := make([]float32, 256)
		if err := Dequantize(tc.dt, y, tc.blk); err != nil {
			t.Fatal(err)
		}
		if y[0] != tc.at0 || y[200] != tc.at200 {
			t.Errorf("%s: elements 0 and 200 decode to %v and %v, worked out by hand %v and %v", tc.dt, y[0], y[200], tc.at0, tc.at200)
		}
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(tc.ref[i]) {
				t.Fatalf("%s element %d: got %v, ggml's loop gives %v", tc.dt, i, y[i], tc.ref[i])
			}
		}
	}
}

// Every element's high bit alone: a Q3_K block whose quants are all 0
// (level −4) but one, whose high bit is set (level 0), decodes to −4·d·sc
// everywhere but at that element. This pins which hmask bit belongs to
// which element, one element at a time.
func TestQ3KHighBitOrder(t *testing.T) {
	for e := 0; e < 256; e++ {
		b := make([]byte, Q3KBytes)
		for i := 0; i < 8; i++ {
			b[96+i] = 0x11 // every scale's low bits 1
		}
		for i := 8; i < 12; i++ {
			b[96+i] = 0x55 // and high bits 1: 17−32 = −15
		}
		binary.LittleEndian.PutUint16(b[108:], 0x3c00)
		b[e%32] |= 1 << (e / 32)
		y := make([]float32, 256)
		if err := Dequantize(Q3_K, y, b); err != nil {
			t.Fatal(err)
		}
		for i, v := range y {
			want := float32(60)
			if i == e {
				want = 0
			}
			if v != want {
				t.Fatalf("high bit of element %d: element %d decodes to %v, want %v", e, i, v, want)
			}
		}
	}
}

func TestUnpackQ3KScales(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 100; trial++ {
		var sc [16]int8
		for i := range sc {
			sc[i] = int8(r.IntN(64) - 32)
		}
		var p [12]byte
		packQ3KScales(&p, &sc)
		if got := UnpackQ3KScales(&p); got != sc {
			t.Fatalf("scales %v pack and unpack to %v", sc, got)
		}
		for is := range sc {
			if g := ggmlQ3KScale(is, p[:]); g != int(sc[is]) {
				t.Fatalf("scale %d: ggml's unpacking reads %d, packed %d", is, g, sc[is])
			}
		}
	}
}

// Zeros decode to zeros, a constant block to (about) itself, and NaN or
// Inf inputs do not panic.
func TestQ3KQ2KSpecialBlocks(t *testing.T) {
	for _, dt := range []DType{Q2_K, Q3_K} {
		for _, c := range []float32{0, 0.75, -2, float32(math.NaN()), float32(math.Inf(1))} {
			x := make([]float32, 256)
			for i := range x {
				x[i] = c
			}
			y := roundTrip(t, dt, x)
			if math.IsNaN(float64(c)) || math.IsInf(float64(c), 0) {
				continue
			}
			for i := range y {
				// A 4- or 6-bit scale off by half a step at most.
				if d := math.Abs(float64(y[i] - c)); d > 0.1*math.Abs(float64(c)) {
					t.Fatalf("%s constant %v: element %d decodes to %v", dt, c, i, y[i])
				}
			}
		}
		if err := Quantize(dt, make([]byte, dt.BlockBytes()), make([]float32, 255)); err == nil {
			t.Errorf("%s: quantizing 255 values did not fail", dt)
		}
		if err := Dequantize(dt, make([]float32, 256), make([]byte, dt.BlockBytes()-1)); err == nil {
			t.Errorf("%s: dequantizing from %d bytes did not fail", dt, dt.BlockBytes()-1)
		}
		if !dt.Computable() {
			t.Errorf("%s is not computable", dt)
		}
	}
}
