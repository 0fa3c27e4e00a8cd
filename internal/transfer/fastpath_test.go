package transfer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// readerOnly hides everything of a KV source but ReadTokens, so Digest
// takes its copying path.
type readerOnly struct{ r KVReader }

func (o readerOnly) ReadTokens(layer, from, to int, k, v []float32) error {
	return o.r.ReadTokens(layer, from, to, k, v)
}

// filledSeq allocates n tokens of random KV (pages of 4 tokens, so a
// prompt spans several pages and ends inside one).
func filledSeq(t *testing.T, n, layers, kvdim int, seed uint64) (*kv.Pool, *kv.Seq) {
	t.Helper()
	return filledSeqIn(t, kv.PoolConfig{Pages: 64, PageSize: 4, Layers: layers, KVDim: kvdim}, n, seed)
}

// filledSeqIn is filledSeq in a pool made with cfg.
func filledSeqIn(t *testing.T, cfg kv.PoolConfig, n int, seed uint64) (*kv.Pool, *kv.Seq) {
	t.Helper()
	layers, kvdim := cfg.Layers, cfg.KVDim
	pool, err := kv.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := pool.Alloc(kv.Owner{Tenant: "a", Request: seed}, n)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	k, v := make([]float32, n*kvdim), make([]float32, n*kvdim)
	for l := range layers {
		for i := range k {
			k[i], v[i] = rng.Float32(), rng.Float32()
		}
		if err := seq.WriteTokens(l, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
	}
	return pool, seq
}

// TestDigestInPlace checks that the digest over pages read in place (Seq
// and Lease lend them) is the digest over the KV copied out, and that it
// still sees a one-float change.
func TestDigestInPlace(t *testing.T) {
	const n, layers, kvdim = 11, 3, 8
	_, seq := filledSeq(t, n, layers, kvdim, 1)
	want, err := Digest(readerOnly{seq}, n, layers, kvdim)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Digest(seq, n, layers, kvdim)
	if err != nil || got != want {
		t.Fatalf("Seq in place: %x, %v; copied: %x", got, err, want)
	}
	lease, err := seq.Lease()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Digest(lease, n, layers, kvdim); err != nil || got != want {
		t.Fatalf("Lease in place: %x, %v; copied: %x", got, err, want)
	}
	for _, workers := range []int{2, 3, 64} { // pages split among goroutines
		if got, err := digest(seq, n, layers, kvdim, workers); err != nil || got != want {
			t.Fatalf("in place, %d goroutines: %x, %v; copied: %x", workers, got, err, want)
		}
	}
	if got, err := Digest(seq, n-1, layers, kvdim); err != nil || got == want {
		t.Fatalf("digest of a shorter prefix: %x, %v", got, err)
	}
	k, v := make([]float32, kvdim), make([]float32, kvdim)
	seq.ReadTokens(2, 9, 10, k, v)
	v[kvdim-1]++
	seq.WriteTokens(2, 9, 10, k, v)
	if got, err := Digest(seq, n, layers, kvdim); err != nil || got == want {
		t.Fatalf("digest after changing one float: %x, %v", got, err)
	}
	if _, err := Digest(seq, n+1, layers, kvdim); err == nil {
		t.Fatal("digest past the written tokens succeeded")
	}
	lease.Release()
	if _, err := Digest(lease, n, layers, kvdim); !errors.Is(err, kv.ErrReleased) {
		t.Fatalf("digest through a released lease: %v", err)
	}
}

// TestSenderFoldedDigest runs a Sender to COMMIT under both frame plans
// (whole tokens per frame, and one token's layers split over frames) and
// checks the digest it folded in while reading frames against Digest over
// its source.
func TestSenderFoldedDigest(t *testing.T) {
	const n, layers, kvdim = 13, 3, 64
	_, seq := filledSeq(t, n, layers, kvdim, 2)
	want, err := Digest(readerOnly{seq}, n, layers, kvdim)
	if err != nil {
		t.Fatal(err)
	}
	// 1100 bytes fit two of the three layers of a token; 64 KiB fit many
	// whole tokens.
	for _, maxFrame := range []int{1100, 1 << 16} {
		t.Run(fmt.Sprint(maxFrame), func(t *testing.T) {
			id := NewID()
			s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: n, Layers: layers, KVDim: kvdim, Source: seq, MaxFrameBytes: maxFrame})
			if err != nil {
				t.Fatal(err)
			}
			s.Step(Start{})
			acts := s.Step(FrameIn{Frame: &Frame{Type: TypeHello, ID: id, Window: 4}})
			if s.chunks == 1 == (maxFrame == 1100) {
				t.Fatalf("frame limit %d planned %d chunks per token", maxFrame, s.chunks)
			}
			var commit *Frame
			for i := 0; commit == nil && i < 1000; i++ {
				for _, a := range acts {
					sf, ok := a.(SendFrame)
					if ok && sf.Frame.Type == TypeCommit {
						commit = sf.Frame
					}
					if ok && sf.Frame.Type == TypeData {
						// The CRC the Sender combined is the one Encode computes.
						b, err := sf.Frame.Encode(nil, maxFrame)
						if err != nil || sf.Frame.crcFrom != crcBuilt || binary.LittleEndian.Uint32(b[len(b)-4:]) != sf.Frame.crc {
							t.Fatalf("DATA %d: built CRC %08x (%v), encoded %x, %v", sf.Frame.Seq, sf.Frame.crc, sf.Frame.crcFrom, b[len(b)-4:], err)
						}
					}
				}
				acts = s.Step(FrameIn{Frame: &Frame{Type: TypeCredit, ID: id, Credit: s.next}})
			}
			if commit == nil {
				t.Fatalf("no COMMIT: %v", s)
			}
			if int(s.summed) != s.frames {
				t.Fatalf("folded %d of %d frames", s.summed, s.frames)
			}
			if commit.Digest != want {
				t.Fatalf("folded digest %x, Digest over the source %x", commit.Digest, want)
			}
		})
	}
}

// bigData is a DATA frame large enough for a pooled buffer, its payload a
// pattern of seq.
func bigData(id ID, seq uint32) *Frame {
	const tokens, kvdim = 2, 3072 // 2 tokens x 1 layer x K+V: 48 KiB
	p := make([]byte, tokens*kvdim*8)
	for i := range p {
		p[i] = byte(int(seq) + i*7)
	}
	return &Frame{Type: TypeData, ID: id, Seq: seq, TokFrom: 2 * seq, TokTo: 2*seq + tokens, LayerFrom: 0, LayerTo: 1, Payload: p}
}

// TestPooledBuffers checks the buffer lifecycle: ReadFrame reads a large
// DATA frame into a pooled buffer, the Receiver hands it to WriteKV,
// Apply gives it back, and a second Apply fails instead of copying a
// recycled buffer; Send gives a Sender's payload back and a resend of the
// same frame fails.
func TestPooledBuffers(t *testing.T) {
	id := NewID()
	f := bigData(id, 0)
	b, err := f.Encode(nil, DefaultMaxFrameBytes)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(b), DefaultMaxFrameBytes)
	if err != nil || !sameFrame(got, f) {
		t.Fatalf("ReadFrame: %v", err)
	}
	if got.buf.fb == nil {
		t.Fatalf("a %d-byte DATA frame was not read into a pooled buffer", len(b))
	}
	if _, err := ReadFrame(bytes.NewReader(b[:len(b)-1]), DefaultMaxFrameBytes); !errors.Is(err, ErrTruncated) {
		t.Fatalf("torn frame: %v", err)
	}
	tbl := NewTable(TableConfig{})
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: 2, Layers: 1, KVDim: 3072, Deadline: time.Hour}); err != nil {
		t.Fatal(err)
	}
	tbl.Step(FrameIn{Peer: 1, Frame: &Frame{Type: TypeOpen, ID: id, Tenant: "a", Tokens: 2, Layers: 1, KVDim: 3072}})
	var w *WriteKV
	for _, a := range tbl.Step(FrameIn{Peer: 1, Frame: got}) {
		if a, ok := a.(WriteKV); ok {
			w = &a
		}
	}
	if w == nil || w.buf != got.buf {
		t.Fatal("the Receiver did not hand the frame's buffer to its WriteKV")
	}
	pool, err := kv.NewPool(kv.PoolConfig{Pages: 1, PageSize: 2, Layers: 1, KVDim: 3072})
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := pool.Alloc(kv.Owner{Tenant: "a", Request: 1}, 2)
	if err := w.Apply(dst, 3072); err != nil {
		t.Fatal(err)
	}
	if w.buf.live() {
		t.Fatal("Apply did not give the buffer back")
	}
	if err := w.Apply(dst, 3072); err == nil {
		t.Fatal("a second Apply of the same WriteKV succeeded")
	}
	k, v := make([]float32, 2*3072), make([]float32, 2*3072)
	if err := dst.ReadTokens(0, 0, 2, k, v); err != nil {
		t.Fatal(err)
	}
	want := append(putFloatsTo(k), putFloatsTo(v)...)
	if !bytes.Equal(want, f.Payload) {
		t.Fatal("the KV written is not the frame's payload")
	}

	// The sending side: a Sender's DATA frame is sent once.
	_, src := filledSeq(t, 8, 1, 3072, 3)
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: 8, Layers: 1, KVDim: 3072, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	s.Step(Start{})
	var data *Frame
	for _, a := range s.Step(FrameIn{Frame: &Frame{Type: TypeHello, ID: id, Window: 1}}) {
		if sf, ok := a.(SendFrame); ok && sf.Frame.Type == TypeData {
			data = sf.Frame
		}
	}
	if data == nil || data.buf.fb == nil {
		t.Fatalf("the Sender's DATA frame %v is not pooled", data)
	}
	ref := data.buf
	a, bconn := Pipe(4, DefaultMaxFrameBytes)
	if err := Send(a, data, DefaultMaxFrameBytes); err != nil {
		t.Fatal(err)
	}
	if data.Payload != nil || ref.live() {
		t.Fatal("Send kept the Sender's payload")
	}
	if err := Send(a, data, DefaultMaxFrameBytes); err == nil {
		t.Fatal("a second Send of the same DATA frame succeeded")
	}
	if got, err := bconn.Read(); err != nil || got.Seq != 0 || len(got.Payload) != 8*3072*8 {
		t.Fatalf("frame sent: %v, %v", got, err)
	}
}

// putFloatsTo is PutFloats into a new buffer.
func putFloatsTo(f []float32) []byte {
	b := make([]byte, 4*len(f))
	PutFloats(b, f)
	return b
}

// TestWriteFrameConcurrent writes large DATA frames (the vectored path)
// and control frames from several goroutines at once, over real TCP
// (writev) and over net.Pipe (the buffered path), and checks that every
// frame arrives whole, intact and in one piece.
func TestWriteFrameConcurrent(t *testing.T) {
	for _, kind := range []string{"tcp", "pipe"} {
		t.Run(kind, func(t *testing.T) {
			var ca, cb net.Conn
			if kind == "pipe" {
				ca, cb = net.Pipe()
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				acc := make(chan net.Conn, 1)
				go func() {
					c, _ := ln.Accept()
					acc <- c
				}()
				if ca, err = net.Dial("tcp", ln.Addr().String()); err != nil {
					t.Fatal(err)
				}
				cb = <-acc
			}
			w, r := NewTCPConn(ca, TCPOptions{}), NewTCPConn(cb, TCPOptions{})
			defer w.Close()
			defer r.Close()
			if tc := w.(*tcpConn); tc.vec != (kind == "tcp") {
				t.Fatalf("%s connection: vectored writes %v", kind, tc.vec)
			}
			const writers, each = 4, 10
			id := NewID()
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						seq := uint32(g*each + i)
						if err := Send(w, bigData(id, seq), DefaultMaxFrameBytes); err != nil {
							t.Error(err)
							return
						}
						if err := Send(w, &Frame{Type: TypeCredit, ID: id, Credit: seq}, DefaultMaxFrameBytes); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			seen := map[uint32]bool{}
			for range 2 * writers * each {
				f, err := r.Read()
				if err != nil {
					t.Fatalf("after %d DATA frames: %v", len(seen), err)
				}
				if f.Type != TypeData {
					continue
				}
				if want := bigData(id, f.Seq); !sameFrame(f, want) || seen[f.Seq] {
					t.Fatalf("DATA seq %d arrived damaged or twice", f.Seq)
				}
				seen[f.Seq] = true
			}
			wg.Wait()
			if len(seen) != writers*each {
				t.Fatalf("%d of %d DATA frames arrived", len(seen), writers*each)
			}
		})
	}
}

// TestCombineCRC checks crc(A‖B) from crc(A), crc(B) and len(B) against
// checksumming A‖B, at every split of random buffers.
func TestCombineCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{0, 1, 7, 64, 1000, 12288} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := crc32.Checksum(b, castagnoli)
		for _, cut := range []int{0, n / 3, n / 2, n} {
			a, c := crc32.Checksum(b[:cut], castagnoli), crc32.Checksum(b[cut:], castagnoli)
			if got := combineCRC(a, c, crcShift(n-cut)); got != want {
				t.Fatalf("%d bytes cut at %d: combined %08x, direct %08x", n, cut, got, want)
			}
			if got := combinerFor(n-cut).combine(a, c); got != want {
				t.Fatalf("%d bytes cut at %d: table-combined %08x, direct %08x", n, cut, got, want)
			}
		}
	}
}

// TestConnectionAbort: an ABORT under the zero id (decode's answer to a
// frame it could not attribute, such as an OPEN hit in its id bytes) fails
// the Sender on that connection with the ABORT's kind and code, while any
// other frame under the zero id is ignored.
func TestConnectionAbort(t *testing.T) {
	id := NewID()
	_, src := filledSeq(t, 8, 1, 64, 3)
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: 8, Layers: 1, KVDim: 64, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	s.Step(Start{})
	if out := s.Step(FrameIn{Frame: &Frame{Type: TypeHello, Window: 1}}); len(out) != 0 || s.Terminal() {
		t.Fatalf("a HELLO under the zero id was taken as the transfer's: %v", out)
	}
	var fail *Fail
	for _, a := range s.Step(FrameIn{Frame: &Frame{Type: TypeAbort, Kind: uint8(errkind.Integrity), Code: CodeChecksum, Reason: "corrupted frame"}}) {
		if f, ok := a.(Fail); ok {
			fail = &f
		}
	}
	if fail == nil || !s.Terminal() || fail.Err.Kind != errkind.Integrity || fail.Err.Code != CodeChecksum {
		t.Fatalf("after the connection's ABORT: fail %+v, terminal %v; want an integrity failure", fail, s.Terminal())
	}
}
