package transfer

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/iotest"
)

func sampleFrames() []*Frame {
	id := ID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	payload := make([]byte, 2*3*8*4) // 2 tokens x 3 layers x kvdim 4
	for i := range payload {
		payload[i] = byte(i)
	}
	return []*Frame{
		{Type: TypeOpen, ID: id, Tenant: "acme", Tokens: 512, Layers: 12, KVDim: 768},
		{Type: TypeHello, ID: id, Window: 16, MaxFrameBytes: 1 << 20},
		{Type: TypeData, ID: id, Seq: 7, TokFrom: 10, TokTo: 12, LayerFrom: 0, LayerTo: 3, Payload: payload},
		{Type: TypeCredit, ID: id, Credit: 8},
		{Type: TypeCommit, ID: id, Tokens: 512, Frames: 40, FirstToken: -3, Digest: [32]byte{9, 9, 9}},
		{Type: TypeAck, ID: id},
		{Type: TypeAbort, ID: id, Kind: 5, Code: CodeDigest, Reason: "digest mismatch"},
		{Type: TypeCancel, ID: id, Kind: 6, Code: CodeCancelled, Reason: "client went away"},
		{Type: TypeCancelled, ID: id},
		{Type: TypeReserve, ID: id, Tenant: "acme", Tokens: 100, MaxNew: 50},
		{Type: TypeReserved, ID: id},
		{Type: TypeRefused, ID: id, Kind: 4, Code: "pool_full", Reason: "no pages"},
	}
}

// sameFrame compares what two frames say, not the bookkeeping a decoder
// attaches (the verified CRC, a pooled buffer).
func sameFrame(a, b *Frame) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.buf, y.buf, x.crc, y.crc, x.crcFrom, y.crcFrom = bufRef{}, bufRef{}, 0, 0, crcNone, crcNone
	return reflect.DeepEqual(x, y)
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range sampleFrames() {
		b, err := f.Encode(nil, DefaultMaxFrameBytes)
		if err != nil {
			t.Fatalf("%v: %v", f.Type, err)
		}
		if len(b) != f.Size() {
			t.Errorf("%v: encoded %d bytes, Size says %d", f.Type, len(b), f.Size())
		}
		got, err := Decode(b, DefaultMaxFrameBytes)
		if err != nil {
			t.Fatalf("%v: decode: %v", f.Type, err)
		}
		if !sameFrame(got, f) {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", f.Type, got, f)
		}
		got, err = ReadFrame(bytes.NewReader(b), DefaultMaxFrameBytes)
		if err != nil || !sameFrame(got, f) {
			t.Errorf("%v: ReadFrame: %v, %+v", f.Type, err, got)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := sampleFrames()[2].Encode(nil, DefaultMaxFrameBytes)
	mut := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
	cases := []struct {
		name  string
		b     []byte
		max   int
		want  error
		hasID bool
	}{
		{"short header", good[:10], DefaultMaxFrameBytes, ErrTruncated, false},
		// A header hit in its magic, version or type still names its
		// transfer, so the transfer fails as corrupted, not as lost.
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), DefaultMaxFrameBytes, ErrMagic, true},
		{"version", mut(func(b []byte) []byte { b[2] = 9; return b }), DefaultMaxFrameBytes, ErrVersion, true},
		{"type", mut(func(b []byte) []byte { b[3] = 99; return b }), DefaultMaxFrameBytes, ErrType, true},
		{"too large", good, 100, ErrTooLarge, true},
		{"truncated body", good[:len(good)-1], DefaultMaxFrameBytes, ErrTruncated, true},
		{"trailing bytes", append(append([]byte(nil), good...), 0), DefaultMaxFrameBytes, ErrBody, true},
		{"checksum", mut(func(b []byte) []byte { b[40] ^= 1; return b }), DefaultMaxFrameBytes, ErrChecksum, true},
	}
	for _, c := range cases {
		_, err := Decode(c.b, c.max)
		var fe *FrameError
		if !errors.Is(err, c.want) || !errors.As(err, &fe) || fe.HasID != c.hasID {
			t.Errorf("%s: got %v, want %v (hasID %v)", c.name, err, c.want, c.hasID)
		} else if fe.HasID && fe.ID != sampleFrames()[2].ID {
			t.Errorf("%s: error claims id %v, the frame's is %v", c.name, fe.ID, sampleFrames()[2].ID)
		}
	}
}

// A header that announces a 4 GiB body must be refused before anything is
// allocated or read past the header.
func TestReadFrameRejectsOversizeBeforeReading(t *testing.T) {
	b, _ := (&Frame{Type: TypeAck, ID: ID{1}}).Encode(nil, DefaultMaxFrameBytes)
	b[20], b[21], b[22], b[23] = 0xff, 0xff, 0xff, 0xff
	r := &countingReader{r: bytes.NewReader(b)}
	if _, err := ReadFrame(r, DefaultMaxFrameBytes); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if r.n != HeaderSize {
		t.Errorf("read %d bytes, want only the %d-byte header", r.n, HeaderSize)
	}
	if _, err := ReadFrame(bytes.NewReader(nil), DefaultMaxFrameBytes); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader(b[:5]), DefaultMaxFrameBytes); !errors.Is(err, ErrTruncated) {
		t.Errorf("torn header: %v, want ErrTruncated", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestEncodeRejects(t *testing.T) {
	long := string(make([]byte, MaxString+1))
	for _, f := range []*Frame{
		{Type: 0},
		{Type: TypeOpen, Tenant: long},
		{Type: TypeData, TokFrom: 1, TokTo: 1, LayerTo: 1, Payload: make([]byte, 8)},
		{Type: TypeData, TokTo: 1, LayerTo: 1, Payload: make([]byte, 7)},
		{Type: TypeData, TokTo: 1, LayerTo: 1, Payload: make([]byte, 2000)},
	} {
		if _, err := f.Encode(nil, MinMaxFrameBytes); err == nil {
			t.Errorf("%+v encoded", f.Type)
		}
	}
	// The largest control frame fits the smallest allowed limit.
	f := &Frame{Type: TypeAbort, Code: long[:MaxString], Reason: long[:MaxString]}
	if _, err := f.Encode(nil, MinMaxFrameBytes); err != nil {
		t.Errorf("full-size ABORT: %v", err)
	}
}

func TestIDParse(t *testing.T) {
	id := NewID()
	if id.IsZero() || NewID() == id {
		t.Fatal("NewID is not random")
	}
	got, err := ParseID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseID(%v) = %v, %v", id, got, err)
	}
	for _, bad := range []string{"", "xyz", id.String()[:30] + "zz"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, _ := fr.Encode(nil, DefaultMaxFrameBytes)
		f.Add(b)
	}
	// A DATA frame large enough that ReadFrame reads it into a pooled buffer.
	if b, err := bigData(ID{1}, 0).Encode(nil, 1<<16); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Decode(b, 1<<16)
		fr2, err2 := ReadFrame(bytes.NewReader(b), 1<<16)
		// ReadFrame checksums a body piece by piece as reads return it:
		// however the stream is cut, the verdict is the same.
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(b)), iotest.HalfReader(bytes.NewReader(b))} {
			fr3, err3 := ReadFrame(r, 1<<16)
			if (err2 == nil) != (err3 == nil) || err2 == nil && !sameFrame(fr2, fr3) {
				t.Fatalf("ReadFrame in small reads: %v, in one: %v", err3, err2)
			}
		}
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("Decode error is not a *FrameError: %v", err)
			}
			return
		}
		if err2 != nil || !sameFrame(fr, fr2) {
			t.Fatalf("Decode accepted what ReadFrame did not: %v", err2)
		}
		// Whatever decodes re-encodes to the same bytes.
		out, err := fr.Encode(nil, 1<<16)
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("re-encode: %v\n got %x\nwant %x", err, out, b)
		}
	})
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzDecodeFrame in step with
// sampleFrames: one seed per message type, plus a bad CRC and a torn frame.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < len(sampleFrames()) {
		t.Fatalf("seed corpus in %s: %d files, %v", dir, len(entries), err)
	}
}
