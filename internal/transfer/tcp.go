package transfer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"time"
)

// TCPOptions tunes a TCP (or any net.Conn, TLS included) transport.
type TCPOptions struct {
	MaxFrameBytes int           // 0: DefaultMaxFrameBytes
	WriteBuffer   int           // bytes buffered before a write reaches the socket; 0: 64 KiB
	WriteTimeout  time.Duration // deadline for writing one frame; 0: 10s
	// ReadIdle is how long Read waits for the next frame before failing;
	// 0: no limit (leases and deadlines in the state machines still end
	// every transfer).
	ReadIdle time.Duration
}

type tcpConn struct {
	c    net.Conn
	opts TCPOptions
	// vec: c writes net.Buffers with one writev (a *net.TCPConn or
	// *net.UnixConn), so a DATA frame goes out as head, payload and CRC
	// in one system call without being copied together first.
	vec bool

	wmu  sync.Mutex
	w    *bufio.Writer
	r    *bufio.Reader
	wbuf []byte      // encode buffer reused by WriteFrame, under wmu
	trl  [4]byte     // a DATA frame's CRC, under wmu
	bufs [][]byte    // writev vector (head, payload pieces, CRC), under wmu
	vecs net.Buffers // view of bufs that WriteTo consumes, under wmu

	closeOnce sync.Once
	closeErr  error
}

// readBuffer is the read side's buffer. It is small on purpose: a DATA
// body bypasses it (bufio reads a request at least this large straight
// into the frame's buffer), and whatever the buffer picked up past a
// header is copied once more, so the smaller it is, the less of each
// payload is copied twice. Control frames are tens of bytes; this still
// holds a hundred of them.
const readBuffer = 4 << 10

// vecPayload is the DATA payload size from which WriteFrame sends head,
// payload and CRC as one vector instead of assembling the frame first.
const vecPayload = 16 << 10

// NewTCPConn frames c. Writes go through a bounded buffer and are flushed
// at the end of every frame, under a per-frame write deadline, so a stalled
// peer blocks a writer for at most WriteTimeout, never without bound.
func NewTCPConn(c net.Conn, opts TCPOptions) Conn {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.WriteBuffer <= 0 {
		opts.WriteBuffer = 64 << 10
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	t := &tcpConn{c: c, opts: opts, w: bufio.NewWriterSize(c, opts.WriteBuffer), r: bufio.NewReaderSize(c, readBuffer)}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		t.vec = true
	}
	return t
}

func (t *tcpConn) Write(frame []byte) error {
	if len(frame) > t.opts.MaxFrameBytes {
		return fmt.Errorf("tcp transfer write: %w: %d bytes, limit %d", ErrTooLarge, len(frame), t.opts.MaxFrameBytes)
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	return t.writeLocked(frame)
}

func (t *tcpConn) writeLocked(frame []byte) error {
	if err := t.c.SetWriteDeadline(time.Now().Add(t.opts.WriteTimeout)); err != nil {
		return fmt.Errorf("tcp transfer write: %w", err)
	}
	if _, err := t.w.Write(frame); err != nil {
		return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
	}
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
	}
	return nil
}

// WriteFrame encodes and writes f: the hot path of a transfer. A control
// frame is encoded into the connection's reusable buffer. A large DATA
// frame's payload is never copied: its head is encoded, the CRC computed
// over head and payload in place (or taken from the Sender, which
// computed it while reading the KV), and head, payload and CRC written as
// one vector. A payload held in place (slices of pinned KV pages,
// alias.go) is checked to be still pinned first, and its slices go into
// the vector as they are. The whole of it runs under the write lock, so
// frames from several goroutines never share the encode buffer or
// interleave, and the vector holds no page once it returns.
func (t *tcpConn) WriteFrame(f *Frame, maxBytes int) error {
	limit := min(maxBytes, t.opts.MaxFrameBytes)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if f.Type != TypeData || f.payloadLen() < vecPayload {
		b, err := f.Encode(t.wbuf[:0], limit)
		if err != nil {
			return err
		}
		t.wbuf = b
		return t.writeLocked(b)
	}
	if err := f.readable(); err != nil {
		return err
	}
	head, err := f.appendHead(t.wbuf[:0], limit)
	if err != nil {
		return err
	}
	t.wbuf = head
	crc := f.crc
	if f.crcFrom != crcBuilt {
		crc = crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, f.Payload)
		for _, p := range f.vec {
			crc = crc32.Update(crc, castagnoli, p)
		}
	}
	binary.LittleEndian.PutUint32(t.trl[:], crc)
	if err := t.c.SetWriteDeadline(time.Now().Add(t.opts.WriteTimeout)); err != nil {
		return fmt.Errorf("tcp transfer write: %w", err)
	}
	t.bufs = append(append(append(t.bufs[:0], head, f.Payload), f.vec...), t.trl[:])
	defer func() {
		clear(t.bufs) // hold no payload past the call
		t.bufs, t.vecs = t.bufs[:0], nil
	}()
	if !t.vec {
		for _, b := range t.bufs {
			if _, err := t.w.Write(b); err != nil {
				return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
			}
		}
		if err := t.w.Flush(); err != nil {
			return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
		}
		return nil
	}
	// Every earlier write was flushed (or failed, and bufio keeps failing),
	// so nothing buffered can be overtaken by the vector.
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
	}
	t.vecs = t.bufs
	if _, err := t.vecs.WriteTo(t.c); err != nil {
		return fmt.Errorf("tcp transfer write to %v: %w", t.c.RemoteAddr(), err)
	}
	return nil
}

func (t *tcpConn) Read() (*Frame, error) {
	if t.opts.ReadIdle > 0 {
		if err := t.c.SetReadDeadline(time.Now().Add(t.opts.ReadIdle)); err != nil {
			return nil, fmt.Errorf("tcp transfer read: %w", err)
		}
	}
	return ReadFrame(t.r, t.opts.MaxFrameBytes)
}

func (t *tcpConn) Close() error {
	t.closeOnce.Do(func() { t.closeErr = t.c.Close() })
	return t.closeErr
}
