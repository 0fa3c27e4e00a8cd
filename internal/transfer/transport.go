package transfer

import (
	"errors"
	"fmt"
	"sync"
)

// Conn carries frames between two peers. It is the edge: state machines
// never see one. Write takes one encoded frame (fault injection may hand
// it a torn piece of one); Read returns the next frame, io.EOF at a clean
// end, or the decoding error (usually a *FrameError) for bytes that did
// not decode — after which the connection should be closed, since a
// stream that carried a bad frame cannot be trusted to be in sync.
//
// Write may be called from several goroutines (frames are written whole,
// never interleaved); Read from one goroutine; Close from any, and it
// unblocks both.
type Conn interface {
	Write(frame []byte) error
	Read() (*Frame, error)
	Close() error
}

// ErrClosed is returned by a Conn used after Close.
var ErrClosed = errors.New("transfer connection closed")

// Send encodes f within maxBytes and writes it to c. A DATA frame that a
// Sender built is sent once: Send gives its pooled payload back when it
// returns, written or not, and leaves f.Payload nil (bufpool.go). Other
// frames are left as they were.
func Send(c Conn, f *Frame, maxBytes int) error {
	defer f.release()
	if fw, ok := c.(interface {
		WriteFrame(*Frame, int) error
	}); ok {
		return fw.WriteFrame(f, maxBytes)
	}
	b, err := f.Encode(nil, maxBytes)
	if err != nil {
		return err
	}
	return c.Write(b)
}

// Pipe returns the two ends of an in-memory connection. Each direction
// buffers up to depth frames (Write blocks when the buffer is full, which
// is the backpressure of a real socket) and checks every frame against
// maxBytes on Read, exactly as the TCP transport does.
func Pipe(depth, maxBytes int) (Conn, Conn) {
	if depth <= 0 {
		depth = 1
	}
	ab, ba := make(chan []byte, depth), make(chan []byte, depth)
	st := &pipeState{done: make(chan struct{})}
	return &pipeEnd{in: ba, out: ab, st: st, max: maxBytes}, &pipeEnd{in: ab, out: ba, st: st, max: maxBytes}
}

// pipeState is shared by both ends: closing either closes the pipe, as a
// reset socket would.
type pipeState struct {
	once sync.Once
	done chan struct{}
}

type pipeEnd struct {
	in, out chan []byte
	st      *pipeState
	max     int
}

func (p *pipeEnd) Write(frame []byte) error {
	b := append([]byte(nil), frame...) // the caller may reuse its buffer
	select {
	case <-p.st.done:
		return ErrClosed
	default:
	}
	select {
	case p.out <- b:
		return nil
	case <-p.st.done:
		return ErrClosed
	}
}

func (p *pipeEnd) Read() (*Frame, error) {
	select {
	case b := <-p.in:
		return Decode(b, p.max)
	case <-p.st.done:
		// Deliver what was written before the close, like a socket's
		// receive buffer, then report the close.
		select {
		case b := <-p.in:
			return Decode(b, p.max)
		default:
			return nil, fmt.Errorf("in-memory transfer pipe: %w", ErrClosed)
		}
	}
}

func (p *pipeEnd) Close() error {
	p.st.once.Do(func() { close(p.st.done) })
	return nil
}
