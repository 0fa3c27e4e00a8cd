package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// baseKVs are the metadata of the file the corruption tests start from.
// Keys that tests rename to collide have equal lengths.
func baseKVs() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"general.alignment", uint32(32)},
		{"k.u8", uint8(1)},
		{"k.i8", int8(-1)},
		{"k.str", "hello"},
		{"a.i32", []int32{1, 2, 3}},
		{"a.str", []string{"x", "yy"}},
		{"a.nested", []any{[]uint16{7}}},
	}
}

var le = binary.LittleEndian

// find returns the offset of s in b, failing the test if it is absent.
func find(t *testing.T, b []byte, s string) int {
	t.Helper()
	i := bytes.Index(b, []byte(s))
	if i < 0 {
		t.Fatalf("%q not in file", s)
	}
	return i
}

// Field offsets, found by searching for the key or tensor name that precedes
// them.
func keyLen(t *testing.T, b []byte, key string) int  { return find(t, b, key) - 8 }
func valType(t *testing.T, b []byte, key string) int { return find(t, b, key) + len(key) }
func valAt(t *testing.T, b []byte, key string) int   { return valType(t, b, key) + 4 }
func nDims(t *testing.T, b []byte, name string) int  { return find(t, b, name) + len(name) }
func dimAt(t *testing.T, b []byte, name string, k int) int {
	return nDims(t, b, name) + 4 + 8*k
}
func typeAt(t *testing.T, b []byte, name string) int {
	return dimAt(t, b, name, int(le.Uint32(b[nDims(t, b, name):])))
}
func offAt(t *testing.T, b []byte, name string) int { return typeAt(t, b, name) + 4 }

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name    string
		kvs     []KV // nil: baseKVs
		corrupt func(t *testing.T, b []byte) []byte
		want    string
	}{
		{"magic", nil, func(t *testing.T, b []byte) []byte { b[0] = 'X'; return b }, `bad magic "XGUF" (0x46554758), want "GGUF"`},
		{"version 1", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[4:], 1); return b }, "unsupported version 1, want 2 or 3"},
		{"version 4", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[4:], 4); return b }, "unsupported version 4, want 2 or 3"},
		{"big-endian", nil, func(t *testing.T, b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 3); return b }, "unsupported version 50331648: a big-endian file"},
		{"truncated header", nil, func(t *testing.T, b []byte) []byte { return b[:10] }, "truncated: tensor count needs 8 bytes at offset 8, file is 10 bytes"},
		{"truncated empty", nil, func(t *testing.T, b []byte) []byte { return b[:0] }, "truncated: magic needs 4 bytes at offset 0, file is 0 bytes"},
		{"truncated value", []KV{{"k.str", "hello"}}, func(t *testing.T, b []byte) []byte { return b[:valAt(t, b, "k.str")+3] }, `truncated: value of key "k.str" length needs 8 bytes at offset 41, file is 44 bytes`},
		{"truncated string", []KV{{"k.str", "hello"}}, func(t *testing.T, b []byte) []byte { return b[:valAt(t, b, "k.str")+10] }, `value of key "k.str": string length 5 at offset 41 is more than the 2 bytes left`},
		{"truncated tensor info", nil, func(t *testing.T, b []byte) []byte { return b[:dimAt(t, b, "t.d", 3)+3] }, `truncated: dimension 3 of tensor "t.d" needs 8 bytes`},
		{"key count", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[16:], 1e6); return b }, "header says 1000000 keys, but only"},
		{"tensor count", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[8:], 1e6); return b }, "header says 1000000 tensors, but only"},
		{"key length", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[keyLen(t, b, "k.u8"):], 1<<40); return b }, "key 2 name: string length 1099511627776 at offset"},
		{"string length", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[valAt(t, b, "k.str"):], 1<<63); return b }, `value of key "k.str": string length 9223372036854775808 at offset`},
		{"array length", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[valAt(t, b, "a.i32")+4:], 1e9); return b }, `key "a.i32": array of 1000000000 int32 at offset`},
		{"string array length", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[valAt(t, b, "a.str")+4:], 1<<62); return b }, `key "a.str": array of 4611686018427387904 string`},
		{"array element string", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[valAt(t, b, "a.str")+12:], 1e6); return b }, `element 0 of key "a.str": string length 1000000`},
		{"nested array length", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[valAt(t, b, "a.nested")+4:], 1e9); return b }, `key "a.nested": array of 1000000000 array`},
		{"value type", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[valType(t, b, "k.u8"):], 13); return b }, `key "k.u8" has unknown value type 13 at offset`},
		{"array type", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[valAt(t, b, "a.i32"):], 99); return b }, `key "a.i32" is an array of unknown value type 99`},
		{"duplicate key", nil, func(t *testing.T, b []byte) []byte { copy(b[find(t, b, "k.i8"):], "k.u8"); return b }, `duplicate key "k.u8" (entries 2 and 3`},
		{"alignment 48", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[valAt(t, b, AlignmentKey):], 48); return b }, "general.alignment 48 is not a power of two"},
		{"alignment 0", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[valAt(t, b, AlignmentKey):], 0); return b }, "general.alignment 0 is not a power of two"},
		{"alignment huge", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[valAt(t, b, AlignmentKey):], 1<<31); return b }, "general.alignment 2147483648 is more than the supported 1073741824"},
		{"alignment string", []KV{{"general.alignmenX", "32"}}, func(t *testing.T, b []byte) []byte { copy(b[find(t, b, "alignmenX"):], "alignment"); return b }, "general.alignment is a string, want an integer"},
		{"alignment negative", []KV{{"general.alignmenX", int8(-32)}}, func(t *testing.T, b []byte) []byte { copy(b[find(t, b, "alignmenX"):], "alignment"); return b }, "general.alignment -32 is not a power of two"},
		{"0 dims", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[nDims(t, b, "t.a"):], 0); return b }, `tensor "t.a" has 0 dimensions, want 1 to 4`},
		{"5 dims", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[nDims(t, b, "t.a"):], 5); return b }, `tensor "t.a" has 5 dimensions, want 1 to 4`},
		{"zero dim", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[dimAt(t, b, "t.a", 1):], 0); return b }, `tensor "t.a" dimension 1 is 0`},
		{"dims overflow", nil, func(t *testing.T, b []byte) []byte {
			le.PutUint64(b[dimAt(t, b, "t.a", 0):], 1<<40)
			le.PutUint64(b[dimAt(t, b, "t.a", 1):], 1<<40)
			return b
		}, `makes the element count overflow`},
		{"dim too big", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[dimAt(t, b, "t.a", 0):], 1<<63); return b }, `tensor "t.a": dimension 0 (9223372036854775808) makes the element count overflow`},
		{"bytes overflow", nil, func(t *testing.T, b []byte) []byte {
			le.PutUint64(b[dimAt(t, b, "t.c", 0):], math.MaxInt/2+1)
			return b
		}, `tensor "t.c": ` + fmt.Sprint(math.MaxInt/2+1) + ` elements of F16 take more than`},
		{"tensor type", nil, func(t *testing.T, b []byte) []byte { le.PutUint32(b[typeAt(t, b, "t.a"):], 99); return b }, `tensor "t.a" has unknown tensor type 99`},
		{"block size", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[dimAt(t, b, "t.b", 0):], 16); return b }, `tensor "t.b": innermost dimension 16 is not a multiple of the Q8_0 block size 32`},
		{"unaligned", nil, func(t *testing.T, b []byte) []byte {
			p := offAt(t, b, "t.c")
			le.PutUint64(b[p:], le.Uint64(b[p:])+4)
			return b
		}, `tensor "t.c" data offset 196 is not a multiple of the alignment 32`},
		{"past end", nil, func(t *testing.T, b []byte) []byte {
			p := offAt(t, b, "t.c")
			le.PutUint64(b[p:], le.Uint64(b[p:])+4096)
			return b
		}, `tensor "t.c" data ends at 4808, file is 1024 bytes`},
		{"truncated data", nil, func(t *testing.T, b []byte) []byte { return b[:len(b)-1] }, `tensor "t.d" data ends at 1024, file is 1023 bytes`},
		{"offset overflow", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[offAt(t, b, "t.c"):], 1<<64-32); return b }, `tensor "t.c" data offset 18446744073709551584 is past the end of the file (1024 bytes)`},
		{"overlap", nil, func(t *testing.T, b []byte) []byte { le.PutUint64(b[offAt(t, b, "t.b"):], 32); return b }, `tensors "t.a" (bytes 512 to 576) and "t.b" (bytes 544 to 646) overlap`},
		{"duplicate tensor", nil, func(t *testing.T, b []byte) []byte { copy(b[find(t, b, "t.c"):], "t.a"); return b }, `duplicate tensor name "t.a" (tensors 0 and 2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kvs := baseKVs()
			if c.kvs != nil {
				kvs = c.kvs
			}
			b := c.corrupt(t, writeBytes(t, kvs, sampleTensors(t)))
			f, err := Parse(b)
			if err == nil {
				t.Fatalf("parsed %d KVs and %d tensors, want error %q", len(f.KVs), len(f.Tensors), c.want)
			}
			wantErr(t, err, c.want)
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("error %q is not a *FormatError with the gguf prefix", err)
			}
		})
	}
}

func TestParseVersion2(t *testing.T) {
	b := writeBytes(t, baseKVs(), sampleTensors(t))
	le.PutUint32(b[4:], 2)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.Tensors) != 4 {
		t.Errorf("version %d, %d tensors", f.Version, len(f.Tensors))
	}
}

// TestParseNestingLimit builds an array nested deeper than any writer
// produces; the reader must refuse it rather than recurse without bound.
func TestParseNestingLimit(t *testing.T) {
	b := []byte(magic)
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 0) // tensors
	b = le.AppendUint64(b, 1) // keys
	b = appendString(b, "deep")
	b = le.AppendUint32(b, uint32(typeArray))
	for i := 0; i < 100; i++ {
		b = arrayHeader(b, typeArray, 1)
	}
	b = arrayHeader(b, typeUint8, 0)
	_, err := Parse(b)
	wantErr(t, err, `gguf: key "deep" nests arrays more than 8 deep at offset`)
}

// TestParseEveryPrefix checks that every truncation of a valid file before
// the end of its last tensor fails cleanly.
func TestParseEveryPrefix(t *testing.T) {
	b := writeBytes(t, baseKVs(), sampleTensors(t))
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	last := f.Tensors[len(f.Tensors)-1]
	end := offsetIn(b, last.Data) + len(last.Data)
	for n := 0; n < end; n++ {
		if _, err := Parse(b[:n:n]); err == nil {
			t.Fatalf("prefix of %d bytes (of %d) parsed", n, end)
		}
	}
}

// TestParseByteFlips corrupts each byte of a valid file in turn. Parse may
// accept or reject the result but must not panic, and what it accepts must
// stay inside the input.
func TestParseByteFlips(t *testing.T) {
	b := writeBytes(t, baseKVs(), sampleTensors(t))
	f, _ := Parse(b)
	end := int(f.DataOffset) // corrupting tensor data changes nothing
	c := make([]byte, len(b))
	for i := 0; i < end; i++ {
		for _, v := range []byte{0x00, 0xff, 0x80, b[i] ^ 1} {
			copy(c, b)
			c[i] = v
			checkParse(t, c)
		}
	}
}
