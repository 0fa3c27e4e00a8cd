package transfer

import (
	"bufio"
	"fmt"
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

	wmu  sync.Mutex
	w    *bufio.Writer
	r    *bufio.Reader
	wbuf []byte // encode buffer reused by WriteFrame, under wmu

	closeOnce sync.Once
	closeErr  error
}

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
	return &tcpConn{c: c, opts: opts, w: bufio.NewWriterSize(c, opts.WriteBuffer), r: bufio.NewReaderSize(c, 64<<10)}
}

func (t *tcpConn) Write(frame []byte) error {
	if len(frame) > t.opts.MaxFrameBytes {
		return fmt.Errorf("tcp transfer write: %w: %d bytes, limit %d", ErrTooLarge, len(frame), t.opts.MaxFrameBytes)
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	return t.writeLocked(frame)
}

func (t *tcpConn) write(frame []byte) error {
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

// WriteFrame encodes f into the connection's reusable buffer and writes
// it: the hot path of a transfer, without a frame-sized allocation per
// frame.
func (t *tcpConn) WriteFrame(f *Frame, maxBytes int) error {
	t.wmu.Lock()
	b, err := f.Encode(t.wbuf[:0], min(maxBytes, t.opts.MaxFrameBytes))
	if err != nil {
		t.wmu.Unlock()
		return err
	}
	t.wbuf = b
	t.wmu.Unlock()
	return t.write(b)
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
