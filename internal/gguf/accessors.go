package gguf

import (
	"fmt"
	"math"
	"strconv"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Get returns the value stored under key. The value is shared with f; do
// not modify slices returned through it.
func (f *File) Get(key string) (any, bool) {
	if f.kvIndex != nil {
		i, ok := f.kvIndex[key]
		if !ok {
			return nil, false
		}
		return f.KVs[i].Value, true
	}
	// A File built by hand rather than parsed has no index.
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the tensor called name. The pointer refers into
// f.Tensors.
func (f *File) Tensor(name string) (*tensor.Tensor, bool) {
	if f.tensorIndex != nil {
		i, ok := f.tensorIndex[name]
		if !ok {
			return nil, false
		}
		return &f.Tensors[i], true
	}
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

// Architecture returns general.architecture, such as "llama".
func (f *File) Architecture() (string, error) { return f.String("general.architecture") }

// lookup returns the value under key or a "not found" error.
func (f *File) lookup(key string) (any, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("%skey %q not found", prefix(f.Path), key)
	}
	return v, nil
}

func (f *File) wrongType(key string, v any, want string) error {
	return fmt.Errorf("%skey %q is %s, want %s", prefix(f.Path), key, describe(v), want)
}

// String returns the string stored under key.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", f.wrongType(key, v, "a string")
	}
	return s, nil
}

// Uint returns the integer stored under key, whatever its width or
// signedness, as long as it is not negative.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	n, ok := integer(v)
	if !ok {
		return 0, f.wrongType(key, v, "an integer")
	}
	if n.neg {
		return 0, fmt.Errorf("%skey %q is %s, want a non-negative integer", prefix(f.Path), key, n)
	}
	return n.mag, nil
}

// Float returns the float32, float64 or integer stored under key as a
// float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	n, ok := integer(v)
	if !ok {
		return 0, f.wrongType(key, v, "a number")
	}
	if n.neg {
		return -float64(n.mag), nil
	}
	return float64(n.mag), nil
}

// Bool returns the bool stored under key.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, f.wrongType(key, v, "a bool")
	}
	return b, nil
}

// Strings returns a copy of the string array stored under key.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.([]string)
	if !ok {
		return nil, f.wrongType(key, v, "an array of string")
	}
	return append([]string(nil), s...), nil
}

// Float32s returns a copy of the float32 array stored under key. A float64
// array is accepted and rounded to float32.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case []float32:
		return append([]float32(nil), x...), nil
	case []float64:
		out := make([]float32, len(x))
		for i, e := range x {
			out[i] = float32(e)
		}
		return out, nil
	}
	return nil, f.wrongType(key, v, "an array of float32")
}

// Int32s returns the integer array stored under key as int32s. Arrays of
// other integer types are accepted when every element fits in an int32.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case []int32:
		return append([]int32(nil), x...), nil
	case []uint8:
		return toInt32s(f, key, x)
	case []int8:
		return toInt32s(f, key, x)
	case []uint16:
		return toInt32s(f, key, x)
	case []int16:
		return toInt32s(f, key, x)
	case []uint32:
		return toInt32s(f, key, x)
	case []uint64:
		return toInt32s(f, key, x)
	case []int64:
		return toInt32s(f, key, x)
	}
	return nil, f.wrongType(key, v, "an array of int32")
}

func toInt32s[T uint8 | int8 | uint16 | int16 | uint32 | uint64 | int64](f *File, key string, xs []T) ([]int32, error) {
	out := make([]int32, len(xs))
	for i, x := range xs {
		n, _ := integer(x)
		if (n.neg && n.mag > -math.MinInt32) || (!n.neg && n.mag > math.MaxInt32) {
			return nil, fmt.Errorf("%skey %q element %d is %s, which does not fit in an int32", prefix(f.Path), key, i, n)
		}
		out[i] = int32(x)
	}
	return out, nil
}

// intVal is an integer of any GGUF width as sign and magnitude, so that
// uint64 and int64 values both fit without overflow.
type intVal struct {
	neg bool
	mag uint64
}

func (n intVal) String() string {
	if n.neg {
		return "-" + strconv.FormatUint(n.mag, 10)
	}
	return strconv.FormatUint(n.mag, 10)
}

func signed(x int64) intVal {
	if x < 0 {
		return intVal{neg: true, mag: uint64(-(x + 1)) + 1}
	}
	return intVal{mag: uint64(x)}
}

// integer converts any GGUF integer value to an intVal.
func integer(v any) (intVal, bool) {
	switch x := v.(type) {
	case uint8:
		return intVal{mag: uint64(x)}, true
	case uint16:
		return intVal{mag: uint64(x)}, true
	case uint32:
		return intVal{mag: uint64(x)}, true
	case uint64:
		return intVal{mag: x}, true
	case int8:
		return signed(int64(x)), true
	case int16:
		return signed(int64(x)), true
	case int32:
		return signed(int64(x)), true
	case int64:
		return signed(x), true
	}
	return intVal{}, false
}
