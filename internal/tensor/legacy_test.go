package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Hand-built blocks with known contents decode to the values GGML's layout
// gives them: element j's quant in the low nibble of byte j, element j+16's
// in the high nibble, the fifth bit of element j in bit j of qh (so element
// 16+j's in bit 16+j, byte 2+j/8 of qh), and the scale, offset and min
// applied as w = (q−16)·d or q·d + m.
func TestLegacyDecodeKnownBlocks(t *testing.T) {
	// Quants chosen so every nibble and every fifth bit is distinct from
	// its neighbours': q[j] = (7j+3) mod 32, read back per element.
	var q [32]int
	for j := range q {
		q[j] = (7*j + 3) % 32
	}
	var qs [16]byte
	var qh uint32
	for j := range 16 {
		qs[j] = byte(q[j]&15) | byte(q[j+16]&15)<<4
		qh |= uint32(q[j]>>4) << j
		qh |= uint32(q[j+16]>>4) << (j + 16)
	}
	const dh, mh = 0x3800, 0xc000 // d = 0.5, m = -2
	for _, tc := range []struct {
		t    DType
		blk  []byte
		want func(j int) float32
	}{
		{Q4_1, le(dh, mh, nil, qs[:]), func(j int) float32 { return float32(q[j]&15)*0.5 - 2 }},
		{Q5_0, le(dh, -1, &qh, qs[:]), func(j int) float32 { return float32(q[j]-16) * 0.5 }},
		{Q5_1, le(dh, mh, &qh, qs[:]), func(j int) float32 { return float32(q[j])*0.5 - 2 }},
	} {
		if len(tc.blk) != tc.t.BlockBytes() {
			t.Fatalf("%s: built %d bytes, the type has %d", tc.t, len(tc.blk), tc.t.BlockBytes())
		}
		// Two blocks, the second with d doubled: block b reads its own
		// header.
		src := append(append([]byte{}, tc.blk...), tc.blk...)
		binary.LittleEndian.PutUint16(src[len(tc.blk):], 0x3c00) // d = 1
		out := make([]float32, 64)
		if err := Dequantize(tc.t, out, src); err != nil {
			t.Fatal(err)
		}
		for j := range 64 {
			want := tc.want(j % 32)
			if j >= 32 {
				// d = 1 doubles w − m: (w−m)·2 + m.
				want = tc.want(j-32)*2 + 2*boolF(tc.t != Q5_0)
			}
			if out[j] != want {
				t.Errorf("%s element %d: got %v, want %v", tc.t, j, out[j], want)
			}
		}
		for j := range 32 {
			want := q[j]
			if tc.t == Q4_1 {
				want &= 15
			}
			if got := LegacyQuant(tc.t, tc.blk, j); got != want {
				t.Errorf("%s: LegacyQuant(%d) = %d, want %d", tc.t, j, got, want)
			}
		}
	}
}

func boolF(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// le builds a block: d, then m unless mh < 0, then qh unless nil, then qs.
func le(dh, mh int, qh *uint32, qs []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(dh))
	if mh >= 0 {
		b = binary.LittleEndian.AppendUint16(b, uint16(mh))
	}
	if qh != nil {
		b = binary.LittleEndian.AppendUint32(b, *qh)
	}
	return append(b, qs...)
}

// Quantising and decoding reconstructs each block within its format's
// error: half a step, plus the float16 rounding of d (carried to the top
// level) and of m. Q5_0's levels run from −16 to +15 steps, so a value of
// the other sign than the block's extreme may clamp a whole step away.
func TestLegacyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	src := make([]float32, 32*200)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	clear(src[32:64])          // an all-zero block
	for i := 64; i < 96; i++ { // a constant block: d = 0, every value m
		src[i] = 0.75
	}
	for i := 96; i < 128; i++ { // all positive: m > 0
		src[i] = 3 + float32(i%7)
	}
	for _, typ := range []DType{Q4_1, Q5_0, Q5_1} {
		out := roundTrip(t, typ, src)
		for b := 0; b < len(src)/32; b++ {
			blk := src[b*32 : b*32+32]
			mn, mx, amax := blk[0], blk[0], float32(0)
			for _, v := range blk {
				mn, mx = min(mn, v), max(mx, v)
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			var tol float32
			switch typ {
			case Q5_0:
				tol = amax/16 + amax/1024
			case Q4_1:
				tol = (mx-mn)/15*0.5 + (mx-mn)/1024 + float32(math.Abs(float64(mn)))/1024
			case Q5_1:
				tol = (mx-mn)/31*0.5 + (mx-mn)/1024 + float32(math.Abs(float64(mn)))/1024
			}
			for i := b * 32; i < b*32+32; i++ {
				if d := float32(math.Abs(float64(out[i] - src[i]))); d > tol*1.01+1e-7 {
					t.Fatalf("%s: element %d is %v, was %v (error %v, block bound %v)", typ, i, out[i], src[i], d, tol)
				}
			}
		}
		// The constant block decodes exactly (m = 0.75 is a float16).
		for i := 64; i < 96 && typ != Q5_0; i++ {
			if out[i] != 0.75 {
				t.Fatalf("%s: constant block element %d is %v, want 0.75", typ, i, out[i])
			}
		}
	}
}

// The quantisers use every level: Q5_1's 0..31 on a ramp, with the fifth
// bits in qh, and Q5_0 puts the block's extreme at level 0 (−16·d with d
// of the opposite sign), as GGML's reference does.
func TestLegacyQuantizeLevels(t *testing.T) {
	ramp := make([]float32, 32)
	for j := range ramp {
		ramp[j] = float32(j)*0.25 - 1
	}
	blk := make([]byte, Q5_1Bytes)
	if err := Quantize(Q5_1, blk, ramp); err != nil {
		t.Fatal(err)
	}
	if d, m := F16ToF32(binary.LittleEndian.Uint16(blk)), F16ToF32(binary.LittleEndian.Uint16(blk[2:])); d != 0.25 || m != -1 {
		t.Errorf("Q5_1 ramp: d %v, m %v, want 0.25 and -1", d, m)
	}
	if qh := binary.LittleEndian.Uint32(blk[4:]); qh != 0xffff0000 {
		t.Errorf("Q5_1 ramp: qh %#08x, want 0xffff0000", qh)
	}
	for j := range 32 {
		if got := LegacyQuant(Q5_1, blk, j); got != j {
			t.Errorf("Q5_1 ramp: element %d has quant %d", j, got)
		}
	}
	blk = make([]byte, Q4_1Bytes)
	if err := Quantize(Q4_1, blk, ramp); err != nil {
		t.Fatal(err)
	}
	for j := range 32 {
		// 15j/31 + 1/2 is never within 1/62 of an integer.
		if got, want := LegacyQuant(Q4_1, blk, j), int(float64(15*j)/31+0.5); got != want {
			t.Errorf("Q4_1 ramp: element %d has quant %d, want %d", j, got, want)
		}
	}
	x := make([]float32, 32)
	x[5], x[20] = 4, -2
	blk = make([]byte, Q5_0Bytes)
	if err := Quantize(Q5_0, blk, x); err != nil {
		t.Fatal(err)
	}
	if d := F16ToF32(binary.LittleEndian.Uint16(blk)); d != -0.25 {
		t.Errorf("Q5_0: d %v, want -0.25", d)
	}
	for j, want := range map[int]int{5: 0, 20: 24, 0: 16} {
		if got := LegacyQuant(Q5_0, blk, j); got != want {
			t.Errorf("Q5_0: element %d has quant %d, want %d", j, got, want)
		}
	}
}

// The types are computable, sized as GGML's, and refuse wrong lengths.
func TestLegacyTypes(t *testing.T) {
	for typ, bb := range map[DType]int{Q4_1: 20, Q5_0: 22, Q5_1: 24} {
		if !typ.Computable() || typ.BlockBytes() != bb || typ.BlockSize() != 32 {
			t.Errorf("%s: computable %v, %d bytes of %d", typ, typ.Computable(), typ.BlockBytes(), typ.BlockSize())
		}
		if err := Quantize(typ, make([]byte, bb-1), make([]float32, 32)); err == nil {
			t.Errorf("%s: quantizing into %d bytes did not fail", typ, bb-1)
		}
		if err := Dequantize(typ, make([]float32, 48), make([]byte, bb)); err == nil {
			t.Errorf("%s: dequantizing 48 values did not fail", typ)
		}
	}
}
