// Package tensor names the element types that weight files use and converts
// between them and float32.
//
// It owns the on-disk block layouts (the GGML type ids and their byte
// formats), which the gguf reader and writer, the converter and the kernels
// share. It holds no tensors of its own and does no arithmetic beyond the
// reference conversions; fast kernels live in package kernels and are tested
// against the conversions here.
package tensor

import "fmt"

// DType is a GGML tensor type id, as stored in GGUF files.
type DType uint32

// GGML type ids. The numbering is GGUF's; ids not listed are unknown here.
const (
	F32  DType = 0
	F16  DType = 1
	Q4_0 DType = 2
	Q4_1 DType = 3
	Q5_0 DType = 6
	Q5_1 DType = 7
	Q8_0 DType = 8
	Q8_1 DType = 9
	Q2_K DType = 10
	Q3_K DType = 11
	Q4_K DType = 12
	Q5_K DType = 13
	Q6_K DType = 14
	Q8_K DType = 15
	I8   DType = 24
	I16  DType = 25
	I32  DType = 26
	I64  DType = 27
	F64  DType = 28
	BF16 DType = 30
)

type typeInfo struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
	compute    bool
}

// types lists the layouts Bulkhead knows. compute marks the ones the kernels
// can multiply directly; the others can be described (so a file that holds
// them gets a precise error) but not yet used for weights.
var types = map[DType]typeInfo{
	F32:  {"F32", 1, 4, true},
	F16:  {"F16", 1, 2, true},
	BF16: {"BF16", 1, 2, true},
	Q8_0: {"Q8_0", 32, 34, true},
	Q4_0: {"Q4_0", 32, 18, true},
	Q4_1: {"Q4_1", 32, 20, true},
	Q5_0: {"Q5_0", 32, 22, true},
	Q5_1: {"Q5_1", 32, 24, true},
	Q8_1: {"Q8_1", 32, 36, false},
	Q2_K: {"Q2_K", 256, 84, true},
	Q3_K: {"Q3_K", 256, 110, true},
	Q4_K: {"Q4_K", 256, 144, true},
	Q5_K: {"Q5_K", 256, 176, true},
	Q6_K: {"Q6_K", 256, 210, true},
	Q8_K: {"Q8_K", 256, 292, false},
	I8:   {"I8", 1, 1, false},
	I16:  {"I16", 1, 2, false},
	I32:  {"I32", 1, 4, false},
	I64:  {"I64", 1, 8, false},
	F64:  {"F64", 1, 8, false},
}

// Known reports whether t is a type whose byte layout Bulkhead knows.
func (t DType) Known() bool { _, ok := types[t]; return ok }

// Computable reports whether the kernels can use weights of type t directly.
func (t DType) Computable() bool { return types[t].compute }

// String returns the GGML name of t, or "type(N)" for unknown ids.
func (t DType) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block of t (1 for plain types).
// It is 0 for unknown types.
func (t DType) BlockSize() int { return types[t].blockSize }

// BlockBytes is the number of bytes in one block of t. It is 0 for unknown
// types.
func (t DType) BlockBytes() int { return types[t].blockBytes }

// RowBytes is the size in bytes of n consecutive elements of type t. n must
// be a multiple of the block size.
func (t DType) RowBytes(n int) (int, error) {
	ti, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if n < 0 || n%ti.blockSize != 0 {
		return 0, fmt.Errorf("%s: %d elements is not a multiple of the block size %d", ti.name, n, ti.blockSize)
	}
	return n / ti.blockSize * ti.blockBytes, nil
}

// ParseDType maps a name such as "q8_0" or "F16" to its type.
func ParseDType(name string) (DType, error) {
	for t, ti := range types {
		if equalFold(ti.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
