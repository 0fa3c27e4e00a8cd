package transfer

import (
	"bytes"
	"net"
	"testing"
	"time"
	"unsafe"
)

// senderFrames runs a Sender to COMMIT with a window that takes every
// frame at once and returns its DATA frames, unsent.
func senderFrames(t *testing.T, src KVSource, n, layers, kvdim, maxFrame int) []*Frame {
	t.Helper()
	id := ID{7}
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: n, Layers: layers, KVDim: kvdim, Source: src,
		MaxFrameBytes: maxFrame, Window: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s.Step(Start{})
	var data []*Frame
	for _, a := range s.Step(FrameIn{Frame: &Frame{Type: TypeHello, ID: id}}) {
		if sf, ok := a.(SendFrame); ok && sf.Frame.Type == TypeData {
			data = append(data, sf.Frame)
		}
	}
	if len(data) == 0 {
		t.Fatal("no DATA frames")
	}
	return data
}

// TestSendInPlace checks the aliasing rule (alias.go): a Sender over a
// lease frames the pinned pages themselves, byte for byte the frames a
// copying Sender builds (CRC included); over a source that does not pin
// it copies; and a frame that aliases pages is refused, sending nothing,
// once the lease is released, or when sent a second time.
func TestSendInPlace(t *testing.T) {
	const n, layers, kvdim = 11, 3, 64
	for _, maxFrame := range []int{1100, 1 << 16} {
		_, seq := filledSeq(t, n, layers, kvdim, 4)
		lease, err := seq.Lease()
		if err != nil {
			t.Fatal(err)
		}
		inPlace := senderFrames(t, lease, n, layers, kvdim, maxFrame)
		copied := senderFrames(t, readerOnly{lease}, n, layers, kvdim, maxFrame)
		fromSeq := senderFrames(t, seq, n, layers, kvdim, maxFrame)
		spans, _ := lease.Spans(nil, 0, n)
		page0 := uintptr(unsafe.Pointer(&spans[0].K[0]))
		for i, f := range inPlace {
			if f.vec == nil || f.Payload != nil || f.buf.fb != nil {
				t.Fatalf("frame limit %d: DATA %d from a lease is not in place", maxFrame, f.Seq)
			}
			if fromSeq[i].vec != nil || copied[i].vec != nil {
				t.Fatal("a Sender over a source that does not pin framed it in place")
			}
			a, err := f.Encode(nil, maxFrame)
			b, err2 := copied[i].Encode(nil, maxFrame)
			if err != nil || err2 != nil || !bytes.Equal(a, b) || f.crcFrom != crcBuilt || f.crc != copied[i].crc {
				t.Fatalf("frame limit %d: DATA %d in place differs from the copy (%v, %v)", maxFrame, f.Seq, err, err2)
			}
		}
		if f := inPlace[0]; f.LayerFrom == 0 && uintptr(unsafe.Pointer(&f.vec[0][0])) != page0 {
			t.Fatal("DATA 0 does not alias the first page")
		}

		// Sent while pinned: the bytes go out, and the frame lets go of
		// the pages, so a second Send fails.
		a, b := Pipe(4, maxFrame)
		if err := Send(a, inPlace[0], maxFrame); err != nil {
			t.Fatal(err)
		}
		if inPlace[0].vec != nil {
			t.Fatal("Send kept the frame's hold on the pages")
		}
		if err := Send(a, inPlace[0], maxFrame); err == nil {
			t.Fatal("a second Send of an in-place frame succeeded")
		}
		if got, err := b.Read(); err != nil || got.Seq != inPlace[0].Seq {
			t.Fatalf("received %v, %v", got, err)
		}

		// After Release: refused by Encode and by the TCP writer, and no
		// byte reaches the socket.
		lease.Release()
		seq.Free()
		late := inPlace[len(inPlace)-1]
		if _, err := late.Encode(nil, maxFrame); err == nil {
			t.Fatal("an in-place frame encoded after its lease was released")
		}
		c1, c2 := net.Pipe()
		got := make(chan int, 1)
		go func() {
			c2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			var buf [1]byte
			n, _ := c2.Read(buf[:])
			got <- n
		}()
		tc := NewTCPConn(c1, TCPOptions{MaxFrameBytes: maxFrame}).(*tcpConn)
		if err := tc.WriteFrame(late, maxFrame); err == nil {
			t.Fatal("an in-place frame was written after its lease was released")
		}
		if n := <-got; n != 0 {
			t.Fatal("bytes of a released page reached the connection")
		}
		c1.Close()
	}
}

// TestSendInPlaceTCP sends in-place frames through the vectored TCP path
// (large payloads) and checks that what arrives is the copying Sender's
// frames, decoded.
func TestSendInPlaceTCP(t *testing.T) {
	const n, layers, kvdim = 12, 2, 1024 // 16 KiB per token: vectored writes
	_, seq := filledSeq(t, n, layers, kvdim, 6)
	lease, _ := seq.Lease()
	defer lease.Release()
	inPlace := senderFrames(t, lease, n, layers, kvdim, 1<<16)
	copied := senderFrames(t, readerOnly{lease}, n, layers, kvdim, 1<<16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		c := NewTCPConn(nc, TCPOptions{MaxFrameBytes: 1 << 16})
		defer c.Close()
		for _, f := range inPlace {
			if f.payloadLen() < vecPayload {
				t.Errorf("DATA %d of %d bytes does not take the vectored path", f.Seq, f.payloadLen())
			}
			if err := Send(c, f, 1<<16); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := NewTCPConn(nc, TCPOptions{MaxFrameBytes: 1 << 16})
	defer c.Close()
	for i := range inPlace {
		got, err := c.Read()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := copied[i].Encode(nil, 1<<16)
		if b, _ := got.Encode(nil, 1<<16); !bytes.Equal(b, want) {
			t.Fatalf("DATA %d arrived different from the copying Sender's", i)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
