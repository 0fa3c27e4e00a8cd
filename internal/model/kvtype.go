package model

import (
	"fmt"
	"unsafe"
)

// KVType is the element type a KV cache stores keys and values in.
//
// Storage of either type is handed around as 4-byte words ([]float32
// slices): for KVF32 the words are the floats themselves, for KVF16 each
// word holds two binary16 values, element 2i in the word's low half on a
// little-endian host. Whoever only moves or checksums KV (the paged pool,
// the transfer) never needs to know which; the forward pass, which reads
// the numbers, does.
type KVType uint8

const (
	// KVF32 stores float32: attention sees exactly the values the forward
	// pass computed. The zero value, and the type the golden outputs are
	// checked with.
	KVF32 KVType = iota
	// KVF16 stores IEEE 754 binary16 (llama.cpp's default cache type):
	// half the memory and half the bytes attention reads and a transfer
	// moves, at the cost of rounding each key and value to 11 significant
	// bits.
	KVF16
)

// Size is the bytes of one element.
func (t KVType) Size() int {
	if t == KVF16 {
		return 2
	}
	return 4
}

// Words is the number of 4-byte storage words that n elements take. n must
// be even for KVF16 (every KV dimension is: heads × head size, both even in
// every supported architecture; NewDenseCache and kv.NewPool check).
func (t KVType) Words(n int) int { return n * t.Size() / 4 }

// String returns the name used in configuration files and flags.
func (t KVType) String() string {
	switch t {
	case KVF32:
		return "f32"
	case KVF16:
		return "f16"
	}
	return fmt.Sprintf("KVType(%d)", uint8(t))
}

// ParseKVType parses "f32" or "f16" (the empty string is f32).
func ParseKVType(s string) (KVType, error) {
	switch s {
	case "", "f32":
		return KVF32, nil
	case "f16":
		return KVF16, nil
	}
	return 0, fmt.Errorf("unknown KV cache type %q (want f32 or f16)", s)
}

// CheckKVLayout reports whether a cache of type t can hold rows of kvDim
// elements in whole words on this host.
func CheckKVLayout(t KVType, kvDim int) error {
	switch t {
	case KVF32:
		return nil
	case KVF16:
		if kvDim%2 != 0 {
			return fmt.Errorf("an f16 KV cache needs an even KV dimension, the model has %d", kvDim)
		}
		if !littleEndian {
			return fmt.Errorf("an f16 KV cache needs a little-endian host")
		}
		return nil
	}
	return fmt.Errorf("unknown KV cache type %v", t)
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// halves views f16 storage words as the binary16 elements they hold.
func halves(w []float32) []uint16 {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&w[0])), 2*len(w))
}
