package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// valueType is a GGUF metadata value type id, as stored in the file.
type valueType uint32

const (
	typeUint8   valueType = 0
	typeInt8    valueType = 1
	typeUint16  valueType = 2
	typeInt16   valueType = 3
	typeUint32  valueType = 4
	typeInt32   valueType = 5
	typeFloat32 valueType = 6
	typeBool    valueType = 7
	typeString  valueType = 8
	typeArray   valueType = 9
	typeUint64  valueType = 10
	typeInt64   valueType = 11
	typeFloat64 valueType = 12
)

var valueTypeNames = [...]string{
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
}

func (t valueType) known() bool { return t <= typeFloat64 }

func (t valueType) String() string {
	if t.known() {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// minSize is the fewest bytes one value of type t can occupy in the file:
// its fixed size, or the length prefix of a string, or the element type
// and count of an array. Counts read from the file are checked against the
// remaining bytes divided by this, so a hostile count cannot make the reader
// allocate more than a small multiple of the file size.
func (t valueType) minSize() int {
	switch t {
	case typeUint8, typeInt8, typeBool:
		return 1
	case typeUint16, typeInt16:
		return 2
	case typeUint32, typeInt32, typeFloat32:
		return 4
	case typeUint64, typeInt64, typeFloat64, typeString:
		return 8
	case typeArray:
		return 12
	}
	return 0
}

// maxDepth bounds the nesting of arrays of arrays. GGUF files in the wild
// nest at most once; the bound keeps a hostile file from recursing deeply.
const maxDepth = 8

// readValue decodes one value of type t for key. depth counts the arrays
// that enclose it.
func (d *decoder) readValue(t valueType, key string, depth int) (any, error) {
	what := fmt.Sprintf("value of key %q", key)
	switch t {
	case typeString:
		return d.str(what)
	case typeArray:
		return d.readArray(key, depth)
	}
	if !t.known() {
		return nil, d.errorf("key %q has unknown value type %d at offset %d", key, uint32(t), d.off-4)
	}
	b, err := d.take(t.minSize(), what)
	if err != nil {
		return nil, err
	}
	return scalar(t, b), nil
}

// scalar decodes a fixed-size value of type t from the front of b.
func scalar(t valueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case typeUint8:
		return b[0]
	case typeInt8:
		return int8(b[0])
	case typeUint16:
		return le.Uint16(b)
	case typeInt16:
		return int16(le.Uint16(b))
	case typeUint32:
		return le.Uint32(b)
	case typeInt32:
		return int32(le.Uint32(b))
	case typeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case typeBool:
		// Any non-zero byte is true, as in GGML's reader.
		return b[0] != 0
	case typeUint64:
		return le.Uint64(b)
	case typeInt64:
		return int64(le.Uint64(b))
	case typeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	panic("gguf: scalar called with non-scalar type " + t.String())
}

// readArray decodes an array body: element type, count, elements.
func (d *decoder) readArray(key string, depth int) (any, error) {
	if depth >= maxDepth {
		return nil, d.errorf("key %q nests arrays more than %d deep at offset %d", key, maxDepth, d.off)
	}
	start := d.off
	et, err := d.u32(fmt.Sprintf("array type of key %q", key))
	if err != nil {
		return nil, err
	}
	elem := valueType(et)
	if !elem.known() {
		return nil, d.errorf("key %q is an array of unknown value type %d at offset %d", key, et, start)
	}
	count, err := d.u64(fmt.Sprintf("array length of key %q", key))
	if err != nil {
		return nil, err
	}
	left := d.left()
	if count > uint64(left/elem.minSize()) {
		return nil, d.errorf("key %q: array of %d %s at offset %d needs at least %d bytes per element, %d bytes left",
			key, count, elem, start, elem.minSize(), left)
	}
	n := int(count)
	switch elem {
	case typeString:
		out := make([]string, n)
		for i := range out {
			s, err := d.str(fmt.Sprintf("element %d of key %q", i, key))
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case typeArray:
		out := make([]any, n)
		for i := range out {
			v, err := d.readArray(key, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	// Fixed-size elements: the count check above already proved they fit.
	size := elem.minSize()
	b, _ := d.take(n*size, "")
	switch elem {
	case typeUint8:
		return append([]uint8{}, b...), nil
	case typeInt8:
		return fixedArray[int8](b, elem, size), nil
	case typeUint16:
		return fixedArray[uint16](b, elem, size), nil
	case typeInt16:
		return fixedArray[int16](b, elem, size), nil
	case typeUint32:
		return fixedArray[uint32](b, elem, size), nil
	case typeInt32:
		return fixedArray[int32](b, elem, size), nil
	case typeFloat32:
		return fixedArray[float32](b, elem, size), nil
	case typeBool:
		return fixedArray[bool](b, elem, size), nil
	case typeUint64:
		return fixedArray[uint64](b, elem, size), nil
	case typeInt64:
		return fixedArray[int64](b, elem, size), nil
	default: // typeFloat64
		return fixedArray[float64](b, elem, size), nil
	}
}

func fixedArray[T any](b []byte, t valueType, size int) []T {
	out := make([]T, len(b)/size)
	for i := range out {
		out[i] = scalar(t, b[i*size:]).(T)
	}
	return out
}

// typeOf maps a Go value to its GGUF type, or reports that it has none.
func typeOf(v any) (valueType, bool) {
	switch v.(type) {
	case uint8:
		return typeUint8, true
	case int8:
		return typeInt8, true
	case uint16:
		return typeUint16, true
	case int16:
		return typeInt16, true
	case uint32:
		return typeUint32, true
	case int32:
		return typeInt32, true
	case float32:
		return typeFloat32, true
	case bool:
		return typeBool, true
	case string:
		return typeString, true
	case uint64:
		return typeUint64, true
	case int64:
		return typeInt64, true
	case float64:
		return typeFloat64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32,
		[]bool, []string, []uint64, []int64, []float64, []any:
		return typeArray, true
	}
	return 0, false
}

// appendValue appends the encoding of v (without its type id) to buf.
func appendValue(buf []byte, key string, v any, depth int) ([]byte, error) {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		return append(buf, x), nil
	case int8:
		return append(buf, byte(x)), nil
	case uint16:
		return le.AppendUint16(buf, x), nil
	case int16:
		return le.AppendUint16(buf, uint16(x)), nil
	case uint32:
		return le.AppendUint32(buf, x), nil
	case int32:
		return le.AppendUint32(buf, uint32(x)), nil
	case float32:
		return le.AppendUint32(buf, math.Float32bits(x)), nil
	case bool:
		if x {
			return append(buf, 1), nil
		}
		return append(buf, 0), nil
	case string:
		return appendString(buf, x), nil
	case uint64:
		return le.AppendUint64(buf, x), nil
	case int64:
		return le.AppendUint64(buf, uint64(x)), nil
	case float64:
		return le.AppendUint64(buf, math.Float64bits(x)), nil
	case []uint8:
		return append(arrayHeader(buf, typeUint8, len(x)), x...), nil
	case []int8:
		return appendArray(buf, key, typeInt8, x, depth)
	case []uint16:
		return appendArray(buf, key, typeUint16, x, depth)
	case []int16:
		return appendArray(buf, key, typeInt16, x, depth)
	case []uint32:
		return appendArray(buf, key, typeUint32, x, depth)
	case []int32:
		return appendArray(buf, key, typeInt32, x, depth)
	case []float32:
		return appendArray(buf, key, typeFloat32, x, depth)
	case []bool:
		return appendArray(buf, key, typeBool, x, depth)
	case []string:
		return appendArray(buf, key, typeString, x, depth)
	case []uint64:
		return appendArray(buf, key, typeUint64, x, depth)
	case []int64:
		return appendArray(buf, key, typeInt64, x, depth)
	case []float64:
		return appendArray(buf, key, typeFloat64, x, depth)
	case []any:
		if depth+1 >= maxDepth {
			return nil, fmt.Errorf("key %q nests arrays more than %d deep", key, maxDepth)
		}
		buf = arrayHeader(buf, typeArray, len(x))
		for i, e := range x {
			if t, ok := typeOf(e); !ok || t != typeArray {
				return nil, fmt.Errorf("key %q: element %d of a nested array is a %T, want an array", key, i, e)
			}
			var err error
			if buf, err = appendValue(buf, key, e, depth+1); err != nil {
				return nil, err
			}
		}
		return buf, nil
	}
	return nil, fmt.Errorf("key %q: value of Go type %T has no GGUF type", key, v)
}

func appendArray[T any](buf []byte, key string, t valueType, xs []T, depth int) ([]byte, error) {
	buf = arrayHeader(buf, t, len(xs))
	for _, x := range xs {
		var err error
		if buf, err = appendValue(buf, key, x, depth+1); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func arrayHeader(buf []byte, t valueType, n int) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	return binary.LittleEndian.AppendUint64(buf, uint64(n))
}

func appendString(buf []byte, s string) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(s)))
	return append(buf, s...)
}

// describe names the kind of a metadata value for error messages:
// "a string", "an array of uint32", "an array of arrays".
func describe(v any) string {
	t, ok := typeOf(v)
	switch {
	case !ok:
		return fmt.Sprintf("a Go %T", v)
	case t != typeArray:
		return article(t.String())
	}
	switch v.(type) {
	case []any:
		return "an array of arrays"
	case []uint8:
		return "an array of uint8"
	case []int8:
		return "an array of int8"
	case []uint16:
		return "an array of uint16"
	case []int16:
		return "an array of int16"
	case []uint32:
		return "an array of uint32"
	case []int32:
		return "an array of int32"
	case []float32:
		return "an array of float32"
	case []bool:
		return "an array of bool"
	case []string:
		return "an array of string"
	case []uint64:
		return "an array of uint64"
	case []int64:
		return "an array of int64"
	default:
		return "an array of float64"
	}
}

func article(s string) string {
	switch s[0] {
	case 'a', 'e', 'i', 'o': // not 'u': "a uint32"
		return "an " + s
	}
	return "a " + s
}
