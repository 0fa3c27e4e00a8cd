package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src into dst as type t. len(src) must be a multiple of
// t's block size and dst must hold exactly RowBytes(len(src)) bytes. The
// encodings follow GGML's reference quantizers, so files Bulkhead writes
// decode the same in llama.cpp (Q4_1, Q5_0 and Q5_1 in legacy.go). The
// K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) use a simpler scale search than
// llama.cpp's (kquant.go, q3k.go) but write the same block layouts.
func Quantize(t DType, dst []byte, src []float32) error {
	want, err := t.RowBytes(len(src))
	if err != nil {
		return err
	}
	if len(dst) != want {
		return fmt.Errorf("quantize %s: %d values need %d bytes, got %d", t, len(src), want, len(dst))
	}
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(src)/32; b++ {
			quantizeQ8_0Block(dst[b*34:b*34+34], src[b*32:b*32+32])
		}
	case Q4_0:
		for b := 0; b < len(src)/32; b++ {
			quantizeQ4_0Block(dst[b*18:b*18+18], src[b*32:b*32+32])
		}
	case Q4_1:
		for b := 0; b < len(src)/32; b++ {
			quantizeMinBlock(dst[b*Q4_1Bytes:], src[b*32:], 15)
		}
	case Q5_0:
		for b := 0; b < len(src)/32; b++ {
			quantizeQ5_0Block(dst[b*Q5_0Bytes:], src[b*32:])
		}
	case Q5_1:
		for b := 0; b < len(src)/32; b++ {
			quantizeMinBlock(dst[b*Q5_1Bytes:], src[b*32:], 31)
		}
	case Q2_K:
		for b := 0; b < len(src)/KBlock; b++ {
			quantizeQ2KBlock(dst[b*Q2KBytes:], src[b*KBlock:])
		}
	case Q3_K:
		for b := 0; b < len(src)/KBlock; b++ {
			quantizeQ3KBlock(dst[b*Q3KBytes:], src[b*KBlock:])
		}
	case Q4_K:
		for b := 0; b < len(src)/KBlock; b++ {
			quantizeQ4KBlock(dst[b*Q4KBytes:], src[b*KBlock:])
		}
	case Q5_K:
		for b := 0; b < len(src)/KBlock; b++ {
			quantizeQ5KBlock(dst[b*Q5KBytes:], src[b*KBlock:])
		}
	case Q6_K:
		for b := 0; b < len(src)/KBlock; b++ {
			quantizeQ6KBlock(dst[b*Q6KBytes:], src[b*KBlock:])
		}
	default:
		return fmt.Errorf("quantize: no encoder for %s", t)
	}
	return nil
}

func quantizeQ8_0Block(dst []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	for j, v := range x {
		dst[2+j] = byte(int8(math.Round(float64(v * id))))
	}
}

func quantizeQ4_0Block(dst []byte, x []float32) {
	id := signedMaxScale(dst, x, 8)
	for j := 0; j < 16; j++ {
		// The conversions round each product before the add: without
		// them Go may fuse x·id+8.5 into one FMA (arm64, GOAMD64=v3),
		// whose single rounding truncates some values to the level
		// below GGML's reference (−22.5 in a block whose extreme is
		// −24: level 0 instead of 1), so files would differ by machine.
		q0 := min(15, int8(float32(x[j]*id)+8.5))
		q1 := min(15, int8(float32(x[16+j]*id)+8.5))
		dst[2+j] = byte(q0) | byte(q1)<<4
	}
}

// signedMaxScale is the scale of GGML's reference Q4_0 and Q5_0
// quantisers: d puts the element of x of largest magnitude (the first of
// equals) at level −levels, so its sign sets d's. It stores d as float16
// in dst[0:2] and returns 1/d for the quants (0 when d is 0).
func signedMaxScale(dst []byte, x []float32, levels float32) float32 {
	var amax, vmax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, vmax = a, v
		}
	}
	d := vmax / -levels
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	return id
}

// Dequantize decodes src, holding len(dst) values of type t, into dst.
func Dequantize(t DType, dst []float32, src []byte) error {
	want, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) != want {
		return fmt.Errorf("dequantize %s: %d values need %d bytes, got %d", t, len(dst), want, len(src))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*34:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := 0; j < 32; j++ {
				dst[b*32+j] = float32(int8(blk[2+j])) * d
			}
		}
	case Q4_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*18:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := 0; j < 16; j++ {
				dst[b*32+j] = float32(int(blk[2+j]&0x0f)-8) * d
				dst[b*32+16+j] = float32(int(blk[2+j]>>4)-8) * d
			}
		}
	case Q4_1, Q5_0, Q5_1:
		bb := t.BlockBytes()
		for b := 0; b < len(dst)/32; b++ {
			dequantLegacyBlock(t, dst[b*32:b*32+32], src[b*bb:b*bb+bb])
		}
	case Q2_K:
		for b := 0; b < len(dst)/KBlock; b++ {
			dequantQ2KBlock(dst[b*KBlock:], src[b*Q2KBytes:])
		}
	case Q3_K:
		for b := 0; b < len(dst)/KBlock; b++ {
			dequantQ3KBlock(dst[b*KBlock:], src[b*Q3KBytes:])
		}
	case Q4_K:
		for b := 0; b < len(dst)/KBlock; b++ {
			dequantQ4KBlock(dst[b*KBlock:], src[b*Q4KBytes:])
		}
	case Q5_K:
		for b := 0; b < len(dst)/KBlock; b++ {
			dequantQ5KBlock(dst[b*KBlock:], src[b*Q5KBytes:])
		}
	case Q6_K:
		for b := 0; b < len(dst)/KBlock; b++ {
			dequantQ6KBlock(dst[b*KBlock:], src[b*Q6KBytes:])
		}
	default:
		return fmt.Errorf("dequantize: no decoder for %s", t)
	}
	return nil
}
