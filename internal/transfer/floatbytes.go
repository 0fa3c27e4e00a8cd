package transfer

import (
	"encoding/binary"
	"unsafe"
)

// nativeLittleEndian is true on every platform Bulkhead ships for; there
// KV floats go to and from the wire as one memory copy instead of a
// conversion per float.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes views f's memory as bytes (the caller must only use it where
// the host is little-endian, so the view equals the wire encoding).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// bytesAsFloats views b as floats. b must come from make or the frame
// buffer pool (so it is aligned for float32) and the host little-endian.
func bytesAsFloats(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// payloadFloats returns a DATA payload as floats: a view of the frame's
// own bytes when the host is little-endian and the payload happens to be
// aligned for float32 (a frame is decoded from a fresh buffer and nothing
// else writes it), else a decoded copy.
func payloadFloats(p []byte) []float32 {
	if nativeLittleEndian && len(p) >= 4 && uintptr(unsafe.Pointer(&p[0]))%unsafe.Alignof(float32(0)) == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
	}
	data := make([]float32, len(p)/4)
	Floats(data, p)
	return data
}
