package transfer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Reading frames: Decode for a frame in memory, ReadFrame for one on a
// stream, and the body decoder they share. Nothing of a frame is decoded
// before its CRC matched.

// Decode decodes exactly one frame from b, which must hold the whole frame
// and nothing after it. Payload aliases b.
func Decode(b []byte, maxBytes int) (*Frame, error) {
	if len(b) < HeaderSize {
		return nil, frameErr(nil, ErrTruncated, "%d bytes, header needs %d", len(b), HeaderSize)
	}
	h, err := parseHeader(b[:HeaderSize], maxBytes)
	if err != nil {
		return nil, err
	}
	if want := uint64(h.blen) + Overhead; uint64(len(b)) != want {
		if uint64(len(b)) < want {
			return nil, frameErr(h, ErrTruncated, "%d bytes, frame needs %d", len(b), want)
		}
		return nil, frameErr(h, ErrBody, "%d trailing bytes after the frame", uint64(len(b))-want)
	}
	end := len(b) - TrailerSize
	return decodeChecked(h, b, crc32.Checksum(b[:end], castagnoli))
}

// ReadFrame reads one frame from r. It reads the header first and rejects
// a frame over maxBytes before allocating its body. A large DATA body is
// read into a pooled buffer that the WriteKV made from the frame gives
// back when applied. A clean end of stream
// before the first byte is io.EOF; a stream that ends inside a frame is a
// *FrameError wrapping ErrTruncated.
func ReadFrame(r io.Reader, maxBytes int) (*Frame, error) {
	var hb [HeaderSize]byte
	if n, err := io.ReadFull(r, hb[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return nil, frameErr(nil, ErrTruncated, "stream ended after %d header bytes", n)
		}
		return nil, err
	}
	h, err := parseHeader(hb[:], maxBytes)
	if err != nil {
		return nil, err
	}
	// Only a large DATA body is worth a pooled buffer; it is read straight
	// into it, and the frame keeps it (see bufpool.go for who gives it
	// back).
	size := HeaderSize + int(h.blen) + TrailerSize
	var b []byte
	var ref bufRef
	if h.typ == TypeData {
		b, ref = getBuf(size)
	} else {
		b = make([]byte, size)
	}
	copy(b, hb[:])
	// The CRC is taken piece by piece as the body arrives, each piece
	// while it is still in cache, instead of in a second pass over a
	// frame that may be larger than the cache. Nothing is decoded, let
	// alone applied, until the whole frame has arrived and matched.
	end := len(b) - TrailerSize
	crc := crc32.Checksum(hb[:], castagnoli)
	for off := HeaderSize; off < len(b); {
		n, err := r.Read(b[off:min(len(b), off+readPiece)])
		if n > 0 {
			crc = crc32.Update(crc, castagnoli, b[min(off, end):min(off+n, end)])
			off += n
		}
		if off < len(b) && err != nil {
			ref.put()
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, frameErr(h, ErrTruncated, "stream ended %d bytes into a %d-byte body", off-HeaderSize, h.blen)
			}
			return nil, err
		}
	}
	f, err := decodeChecked(h, b, crc)
	if err != nil {
		ref.put()
		return nil, err
	}
	f.buf = ref
	return f, nil
}

// readPiece bounds one read of a frame body: small enough that the piece
// is still in cache when ReadFrame checksums it (a core's L2 holds a few
// of them), large enough that a frame takes few system calls.
const readPiece = 256 << 10

// decodeChecked checks got, the CRC of the complete frame b less its
// trailer, against the trailer and decodes the body.
func decodeChecked(h *header, b []byte, got uint32) (*Frame, error) {
	end := len(b) - TrailerSize
	want := binary.LittleEndian.Uint32(b[end:])
	if got != want {
		return nil, frameErr(h, ErrChecksum, "computed %08x, frame says %08x", got, want)
	}
	f := &Frame{Type: h.typ, ID: h.id, crc: got, crcFrom: crcDecoded}
	d := decoder{b: b[HeaderSize:end]}
	switch f.Type {
	case TypeOpen:
		f.Tokens, f.Layers, f.KVDim, f.Window = d.u32(), d.u16(), d.u32(), d.u32()
		f.Tenant = d.str()
	case TypeHello:
		f.Window, f.MaxFrameBytes = d.u32(), d.u32()
	case TypeData:
		f.Seq, f.TokFrom, f.TokTo = d.u32(), d.u32(), d.u32()
		f.LayerFrom, f.LayerTo = d.u16(), d.u16()
		f.Payload = d.rest()
		if d.err == nil {
			if err := checkDataShape(f); err != nil {
				return nil, frameErr(h, err, "")
			}
		}
	case TypeCredit:
		f.Credit = d.u32()
	case TypeCommit:
		f.Tokens, f.Frames, f.FirstToken = d.u32(), d.u32(), int32(d.u32())
		copy(f.Digest[:], d.bytes(32))
	case TypeAbort, TypeCancel, TypeRefused:
		f.Kind = d.u8()
		f.Code, f.Reason = d.str(), d.str()
	case TypeReserve:
		f.Tokens, f.MaxNew = d.u32(), d.u32()
		f.Tenant = d.str()
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d unexpected bytes after the fields", len(d.b))
	}
	if d.err != nil {
		return nil, frameErr(h, ErrBody, "%v body: %v", f.Type, d.err)
	}
	return f, nil
}

// decoder reads fields off a body, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("needs %d more bytes, has %d", n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() uint8 {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) str() string {
	n := int(d.u16())
	if d.err == nil && n > MaxString {
		d.err = fmt.Errorf("string of %d bytes, limit %d", n, MaxString)
		return ""
	}
	return string(d.bytes(n))
}

func (d *decoder) rest() []byte {
	out := d.b
	d.b = nil
	return out
}

// PutFloats writes src as little-endian float32 bytes into dst, which must
// hold 4*len(src) bytes.
func PutFloats(dst []byte, src []float32) {
	if nativeLittleEndian {
		copy(dst, floatBytes(src)) // the wire format is the memory format
		return
	}
	for i, x := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
}

// Floats decodes little-endian float32 bytes b into dst (len(b)/4 floats).
func Floats(dst []float32, b []byte) {
	if nativeLittleEndian {
		copy(floatBytes(dst), b)
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}
