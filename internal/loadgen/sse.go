package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one dispatched server-sent event.
type Event struct {
	// Name is the value of the last "event" field, or "" when the event
	// had none (the standard's default type, "message").
	Name string
	// Data is the event's data fields joined with "\n".
	Data string
}

// ErrLineTooLong is returned by SSEReader.Next when a line, or an event's
// accumulated data, exceeds the reader's limit.
var ErrLineTooLong = errors.New("sse: line or event longer than the limit")

// SSEReader parses a text/event-stream as the WHATWG HTML standard
// (section 9.2.6, "Interpreting an event stream") describes: lines end in
// CRLF, LF or a lone CR; a leading UTF-8 BOM is skipped; lines starting
// with ':' are comments; "data" fields accumulate; a blank line dispatches
// the event, unless it had no data field. The "id" and "retry" fields are
// parsed but not needed here, so they are dropped.
//
// It reads a byte at a time from a buffered reader and never waits for
// more input than the current line needs, so the caller can time each
// event at the moment its final blank line arrives.
type SSEReader struct {
	r       *bufio.Reader
	limit   int
	line    []byte
	data    []byte
	hasData bool
	name    string
	// skipLF is set after a line ended in CR: a LF that follows belongs
	// to the same line ending. Remembering it, rather than peeking, means
	// a CR at the end of one network read never waits for the next.
	skipLF  bool
	started bool
	// partial is set while a line or an event is half read, so that EOF
	// there is reported as io.ErrUnexpectedEOF.
	partial bool
}

// NewSSEReader returns a reader over r that refuses lines, and events'
// data, longer than limit bytes.
func NewSSEReader(r io.Reader, limit int) *SSEReader {
	return &SSEReader{r: bufio.NewReader(r), limit: limit}
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// Next returns the next event. At the end of the stream it returns io.EOF
// when the stream ended between events, and io.ErrUnexpectedEOF when it
// ended inside one; the standard discards such an incomplete event, and
// so does Next. Other read errors are returned as they are.
func (s *SSEReader) Next() (Event, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && (s.partial || s.hasData || s.name != "") {
				err = io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if !s.hasData {
				s.name = ""
				continue
			}
			ev := Event{Name: s.name, Data: string(bytes.TrimSuffix(s.data, []byte{'\n'}))}
			s.data, s.hasData, s.name = s.data[:0], false, ""
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte{' '})
		}
		switch string(field) {
		case "data":
			if len(s.data)+len(value)+1 > s.limit {
				return Event{}, ErrLineTooLong
			}
			s.data = append(append(s.data, value...), '\n')
			s.hasData = true
		case "event":
			s.name = string(value)
		}
	}
}

// readLine returns the next line without its ending. The returned slice
// is valid until the next call.
func (s *SSEReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if err == io.EOF && len(s.line) > 0 {
				s.partial = true
			}
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n', '\r':
			s.skipLF = b == '\r'
			s.partial = false
			if !s.started {
				s.started = true
				s.line = bytes.TrimPrefix(s.line, bom)
			}
			return s.line, nil
		}
		if len(s.line) >= s.limit {
			return nil, fmt.Errorf("%w (%d bytes)", ErrLineTooLong, s.limit)
		}
		s.line = append(s.line, b)
		s.partial = true
	}
}
