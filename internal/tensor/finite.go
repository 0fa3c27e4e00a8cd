package tensor

import "encoding/binary"

// scaleFields lists, for each block type Quantize writes, the byte offsets
// of the float16 fields in a block (the scale d and, where the type has
// one, the min or dmin). A non-finite one makes every value of the block
// decode to NaN or ±Inf.
var scaleFields = map[DType][]int{
	Q8_0: {0}, Q4_0: {0}, Q5_0: {0},
	Q4_1: {0, 2}, Q5_1: {0, 2},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208},
}

// FirstNonFinite returns the index of the first of the n values that data
// holds as type t which does not decode to a finite number: a NaN or
// infinite F32, F16 or BF16 value, or the first element of a block whose
// float16 scale or min is NaN or infinite. It returns −1 when every value
// is finite. These are the checks llama.cpp's ggml_validate_row_data makes
// before it writes quantised weights, so a file that passes them is one
// llama-quantize could have written. data must hold exactly n values;
// types without a check here (other than those above) report −1.
func FirstNonFinite(t DType, data []byte, n int) int {
	switch t {
	case F32:
		for i := range n {
			if b := binary.LittleEndian.Uint32(data[4*i:]); b&0x7f800000 == 0x7f800000 {
				return i
			}
		}
		return -1
	case F16:
		for i := range n {
			if binary.LittleEndian.Uint16(data[2*i:])&0x7c00 == 0x7c00 {
				return i
			}
		}
		return -1
	case BF16:
		for i := range n {
			if binary.LittleEndian.Uint16(data[2*i:])&0x7f80 == 0x7f80 {
				return i
			}
		}
		return -1
	}
	fields, ok := scaleFields[t]
	if !ok {
		return -1
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	for b := 0; b < n/bs; b++ {
		for _, off := range fields {
			if binary.LittleEndian.Uint16(data[b*bb+off:])&0x7c00 == 0x7c00 {
				return b * bs
			}
		}
	}
	return -1
}
