package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Wire layout of every frame (all integers little-endian):
//
//	offset size field
//	0      2    magic "BK" (0x42 0x4B)
//	2      1    version (2)
//	3      1    type
//	4      16   transfer id
//	20     4    body length B
//	24     B    body (layout per type, see docs/transfer-protocol.md)
//	24+B   4    CRC32C (Castagnoli) of bytes [0, 24+B)
const (
	Magic0, Magic1 = 'B', 'K'
	// Version is the wire version this package speaks. 2: OPEN carries
	// the sender's window.
	Version = 2
	// HeaderSize is the fixed header before the body.
	HeaderSize = 24
	// TrailerSize is the CRC32C after the body.
	TrailerSize = 4
	// Overhead is the bytes of a frame that are not body.
	Overhead = HeaderSize + TrailerSize
	// DefaultMaxFrameBytes bounds a whole frame, header and CRC included.
	DefaultMaxFrameBytes = 1 << 20
	// MaxString bounds tenant names, error codes and reasons on the wire.
	MaxString = 512
	// MinMaxFrameBytes is the smallest frame limit that still fits every
	// control frame with full-length strings (an ABORT: kind and two
	// strings).
	MinMaxFrameBytes = Overhead + 1 + 2*(2+MaxString)
	// DataHeaderSize is the fixed part of a DATA body before the payload.
	DataHeaderSize = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Type is a frame's message type.
type Type uint8

// Message types. The P<->D stream uses OPEN..CANCELLED; RESERVE, RESERVED
// and REFUSED are the router<->decode reservation messages, for edges that
// carry them over this framing.
const (
	TypeOpen      Type = 1  // P->D: bind the stream to a reservation
	TypeHello     Type = 2  // D->P: reservation matched; window and frame limit
	TypeData      Type = 3  // P->D: KV for a token range x layer range
	TypeCredit    Type = 4  // D->P: cumulative count of DATA seqs received
	TypeCommit    Type = 5  // P->D: count, first token, digest
	TypeAck       Type = 6  // D->P: verified and Ready; P may release
	TypeAbort     Type = 7  // either way: the transfer failed
	TypeCancel    Type = 8  // R->P or R->D: client went away
	TypeCancelled Type = 9  // reply to CANCEL
	TypeReserve   Type = 10 // R->D: reserve pages for n + max_new tokens
	TypeReserved  Type = 11 // D->R: reservation made
	TypeRefused   Type = 12 // D->R: reservation refused
	typeMax            = TypeRefused
)

var typeNames = [...]string{"", "OPEN", "HELLO", "DATA", "CREDIT", "COMMIT", "ACK", "ABORT", "CANCEL", "CANCELLED", "RESERVE", "RESERVED", "REFUSED"}

func (t Type) String() string {
	if t >= 1 && t <= typeMax {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Frame is one decoded message. Which fields are meaningful depends on
// Type; the others are zero (Encode ignores them, Decode leaves them zero).
type Frame struct {
	Type Type
	ID   ID

	// OPEN: Tenant, Tokens, Layers, KVDim, Window. RESERVE: Tenant,
	// Tokens, MaxNew.
	// COMMIT: Tokens.
	Tenant string
	Tokens uint32
	MaxNew uint32
	Layers uint16
	KVDim  uint32

	// HELLO: the receiver's window and frame limit. OPEN: the sender's
	// window, so that the receiver knows the agreed one (the smaller) and
	// can credit in steps of half of it.
	Window        uint32
	MaxFrameBytes uint32

	// DATA: sequence number, ranges [TokFrom, TokTo) x [LayerFrom,
	// LayerTo), and the payload as raw little-endian float32 bytes: for
	// each layer in range, K of every token in range ([token][kvdim]),
	// then V likewise. After Decode, Payload aliases the decoded buffer;
	// after ReadFrame it may alias a pooled one, which WriteKV.Apply gives
	// back (bufpool.go says who owns a payload, and until when). A
	// Sender's frame may hold its payload in place instead, in pinned KV
	// pages, with Payload nil: Encode and Send read it (alias.go).
	Seq                uint32
	TokFrom, TokTo     uint32
	LayerFrom, LayerTo uint16
	Payload            []byte

	// CREDIT: every DATA seq below Credit has been received.
	Credit uint32

	// COMMIT: number of DATA frames, first sampled token, SHA-256 digest of
	// the KV in token order (see Digest).
	Frames     uint32
	FirstToken int32
	Digest     [32]byte

	// ABORT, CANCEL, REFUSED: why, as an errkind kind, code and message.
	Kind   uint8
	Code   string
	Reason string

	// buf is the pooled buffer Payload lives in, if any (see bufpool.go
	// for who gives it back, and when).
	buf bufRef
	// vec, when not nil, is a Sender's DATA payload held in place: the
	// payload's bytes, in payload order, as slices of the Source's pinned
	// KV pages, and Payload is nil. vecLen is their total length. pin
	// says whether the pages are still pinned; nothing reads vec once it
	// says no (alias.go has the rule).
	vec    [][]byte
	vecLen int
	pin    pinner
	// crc is the frame's wire checksum, known without reading the frame
	// again: crcFrom says whence. The Receiver keys duplicates on a
	// decoded frame's; the TCP transport sends a Sender's as it is.
	crc     uint32
	crcFrom crcSource
}

// crcSource says where a Frame's crc field came from.
type crcSource uint8

const (
	crcNone    crcSource = iota // not known: compute it from the fields
	crcDecoded                  // verified by Decode or ReadFrame
	crcBuilt                    // computed by the Sender that built the frame
)

// Frame decoding errors. Every error Decode and ReadFrame return wraps one
// of them inside a *FrameError.
var (
	ErrMagic     = errors.New("not a transfer frame (bad magic)")
	ErrVersion   = errors.New("unsupported transfer frame version")
	ErrType      = errors.New("unknown transfer frame type")
	ErrTooLarge  = errors.New("transfer frame exceeds the frame size limit")
	ErrTruncated = errors.New("transfer frame truncated")
	ErrChecksum  = errors.New("transfer frame checksum mismatch")
	ErrBody      = errors.New("malformed transfer frame body")
)

// FrameError is a frame that failed to decode. When HasID is true the
// header was intact enough to read a transfer id from, but the id is only
// claimed: it is not covered by a verified checksum.
type FrameError struct {
	Type  Type
	ID    ID
	HasID bool
	Err   error
}

func (e *FrameError) Error() string {
	if e.HasID {
		return fmt.Sprintf("transfer frame %v for %v: %v", e.Type, e.ID, e.Err)
	}
	return "transfer frame: " + e.Err.Error()
}

func (e *FrameError) Unwrap() error { return e.Err }

func frameErr(h *header, err error, format string, args ...any) *FrameError {
	fe := &FrameError{Err: err}
	if format != "" {
		fe.Err = fmt.Errorf("%w: "+format, append([]any{err}, args...)...)
	}
	if h != nil {
		fe.Type, fe.ID, fe.HasID = h.typ, h.id, true
	}
	return fe
}

type header struct {
	typ  Type
	id   ID
	blen uint32
}

// parseHeader checks magic, version, type and the size limit. Whichever
// check fails, the error carries the id the header claims: a frame whose
// magic, version or type bits were hit is still attributed to its
// transfer, so that the transfer fails as corrupted rather than as a lost
// connection. The claim is not covered by a checksum; a corrupted id, or
// bytes that are no frame at all, match no live 128-bit id.
func parseHeader(b []byte, maxBytes int) (*header, error) {
	h := &header{typ: Type(b[3]), blen: binary.LittleEndian.Uint32(b[20:24])}
	copy(h.id[:], b[4:20])
	if b[0] != Magic0 || b[1] != Magic1 {
		return nil, frameErr(h, ErrMagic, "first bytes %#x %#x", b[0], b[1])
	}
	if b[2] != Version {
		return nil, frameErr(h, ErrVersion, "version %d, this build speaks %d", b[2], Version)
	}
	if h.typ < 1 || h.typ > typeMax {
		return nil, frameErr(h, ErrType, "type %d", b[3])
	}
	if total := uint64(h.blen) + Overhead; total > uint64(maxBytes) {
		return nil, frameErr(h, ErrTooLarge, "%d bytes, limit %d", total, maxBytes)
	}
	return h, nil
}

// Size returns the encoded size of f in bytes.
func (f *Frame) Size() int { return Overhead + f.bodyLen() }

func (f *Frame) bodyLen() int {
	switch f.Type {
	case TypeOpen:
		return 14 + 2 + len(f.Tenant)
	case TypeHello:
		return 8
	case TypeData:
		return DataHeaderSize + f.payloadLen()
	case TypeCredit:
		return 4
	case TypeCommit:
		return 12 + 32
	case TypeAbort, TypeCancel, TypeRefused:
		return 1 + 2 + len(f.Code) + 2 + len(f.Reason)
	case TypeReserve:
		return 8 + 2 + len(f.Tenant)
	}
	return 0 // ACK, CANCELLED, RESERVED
}

// Encode appends the encoding of f to dst. It fails when f cannot be
// encoded within maxBytes or a field is out of its wire range, so a frame
// that Encode produced always decodes with the same limit, unless it is
// a DATA frame whose Sender's CRC no longer matches its payload (which
// Encode sends as it is, for decode to refuse).
func (f *Frame) Encode(dst []byte, maxBytes int) ([]byte, error) {
	start := len(dst)
	dst, err := f.appendHead(dst, maxBytes)
	if err != nil {
		return dst, err
	}
	if f.Type == TypeData {
		if err := f.readable(); err != nil {
			return dst[:start], err
		}
		dst = append(dst, f.Payload...)
		for _, p := range f.vec {
			dst = append(dst, p...)
		}
		if f.crcFrom == crcBuilt {
			// The Sender's CRC goes out as the TCP writer sends it, even
			// where it no longer matches the payload (a checksum kept
			// from when the KV was written, of a vector changed since):
			// decode is the one to refuse that frame.
			return binary.LittleEndian.AppendUint32(dst, f.crc), nil
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

// appendHead checks f and appends its encoding up to the CRC, less the
// payload of a DATA frame: the header and every body field before it. A
// writer can then send head, payload and CRC without first copying the
// payload behind the head.
func (f *Frame) appendHead(dst []byte, maxBytes int) ([]byte, error) {
	if f.Type < 1 || f.Type > typeMax {
		return dst, fmt.Errorf("encode: %w: %d", ErrType, f.Type)
	}
	for _, s := range [...]string{f.Tenant, f.Code, f.Reason} {
		if len(s) > MaxString {
			return dst, fmt.Errorf("encode %v: string of %d bytes, limit %d", f.Type, len(s), MaxString)
		}
	}
	if f.Type == TypeData {
		if err := checkDataShape(f); err != nil {
			return dst, fmt.Errorf("encode: %w", err)
		}
	}
	n := f.Size()
	if n > maxBytes {
		return dst, fmt.Errorf("encode %v: %w: %d bytes, limit %d", f.Type, ErrTooLarge, n, maxBytes)
	}
	le := binary.LittleEndian
	dst = append(dst, Magic0, Magic1, Version, byte(f.Type))
	dst = append(dst, f.ID[:]...)
	dst = le.AppendUint32(dst, uint32(f.bodyLen()))
	switch f.Type {
	case TypeOpen:
		dst = le.AppendUint32(dst, f.Tokens)
		dst = le.AppendUint16(dst, f.Layers)
		dst = le.AppendUint32(dst, f.KVDim)
		dst = le.AppendUint32(dst, f.Window)
		dst = appendString(dst, f.Tenant)
	case TypeHello:
		dst = le.AppendUint32(dst, f.Window)
		dst = le.AppendUint32(dst, f.MaxFrameBytes)
	case TypeData:
		dst = le.AppendUint32(dst, f.Seq)
		dst = le.AppendUint32(dst, f.TokFrom)
		dst = le.AppendUint32(dst, f.TokTo)
		dst = le.AppendUint16(dst, f.LayerFrom)
		dst = le.AppendUint16(dst, f.LayerTo)
	case TypeCredit:
		dst = le.AppendUint32(dst, f.Credit)
	case TypeCommit:
		dst = le.AppendUint32(dst, f.Tokens)
		dst = le.AppendUint32(dst, f.Frames)
		dst = le.AppendUint32(dst, uint32(f.FirstToken))
		dst = append(dst, f.Digest[:]...)
	case TypeAbort, TypeCancel, TypeRefused:
		dst = append(dst, f.Kind)
		dst = appendString(dst, f.Code)
		dst = appendString(dst, f.Reason)
	case TypeReserve:
		dst = le.AppendUint32(dst, f.Tokens)
		dst = le.AppendUint32(dst, f.MaxNew)
		dst = appendString(dst, f.Tenant)
	}
	return dst, nil
}

// dataCRC is the CRC32C a DATA frame carries (or would carry) on the
// wire: the verified one for a decoded frame, else computed from the
// fields. Equal CRCs of two frames with the same id and seq mean, as far
// as CRC32C can tell, byte-identical frames.
func (f *Frame) dataCRC() uint32 {
	if f.crcFrom != crcNone {
		return f.crc
	}
	var hb [HeaderSize + DataHeaderSize]byte
	var crc uint32
	if head, err := f.appendHead(hb[:0], math.MaxInt); err == nil {
		crc = crc32.Checksum(head, castagnoli)
	} // else a frame that cannot be encoded has no wire CRC; the payload's own still tells different payloads apart
	if f.readable() != nil {
		return crc
	}
	crc = crc32.Update(crc, castagnoli, f.Payload)
	for _, p := range f.vec {
		crc = crc32.Update(crc, castagnoli, p)
	}
	return crc
}

// payloadLen is the length of a DATA frame's payload, however it is held.
func (f *Frame) payloadLen() int {
	if f.vec != nil {
		return f.vecLen
	}
	return len(f.Payload)
}

// release gives back a pooled payload (a Sender's DATA frame, once sent)
// and drops the frame's hold on it. A frame that is not pooled is left
// untouched, so control frames shared between goroutines are never
// written to here.
func (f *Frame) release() {
	if f.vec != nil {
		// In place: nothing to give back, but the frame lets go of the
		// pages, so a second send fails in Encode instead of reading them.
		f.vec, f.vecLen, f.pin = nil, 0, nil
		return
	}
	if f.buf.fb == nil {
		return
	}
	f.buf.put()
	f.buf, f.Payload = bufRef{}, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// checkDataShape checks a DATA frame's ranges against its payload length,
// without knowing the receiver's kvdim: the payload must be a whole,
// non-zero number of floats per (token, layer) cell, K and V.
func checkDataShape(f *Frame) error {
	if f.TokTo <= f.TokFrom || f.LayerTo <= f.LayerFrom {
		return fmt.Errorf("%w: empty range tokens [%d, %d) layers [%d, %d)", ErrBody, f.TokFrom, f.TokTo, f.LayerFrom, f.LayerTo)
	}
	cells := uint64(f.TokTo-f.TokFrom) * uint64(f.LayerTo-f.LayerFrom)
	if n := uint64(f.payloadLen()); n == 0 || n%(cells*8) != 0 {
		return fmt.Errorf("%w: payload of %d bytes is not a whole K+V float32 vector for each of %d cells", ErrBody, n, cells)
	}
	return nil
}
