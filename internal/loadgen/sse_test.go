package loadgen

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// parseAll reads every event from r and the error that ended the stream.
func parseAll(r io.Reader, limit int) ([]Event, error) {
	s := NewSSEReader(r, limit)
	var evs []Event
	for {
		ev, err := s.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSE(t *testing.T) {
	tests := []struct {
		in   string
		want []Event
		err  error
	}{
		{"data: a\n\n", []Event{{Data: "a"}}, io.EOF},
		{"data:a\r\ndata: b\r\n\r\n", []Event{{Data: "a\nb"}}, io.EOF},
		{"data: x\r\rdata: y\n\n", []Event{{Data: "x"}, {Data: "y"}}, io.EOF},
		{"event: error\ndata: boom\n\n", []Event{{Name: "error", Data: "boom"}}, io.EOF},
		{": a comment\n\n", nil, io.EOF},
		{"data\n\n", []Event{{Data: ""}}, io.EOF},
		{"event: e\n\ndata: z\n\n", []Event{{Data: "z"}}, io.EOF}, // no data: nothing dispatched, name dropped
		{"\xEF\xBB\xBFdata: bom\n\n", []Event{{Data: "bom"}}, io.EOF},
		{"data:  two\n\n", []Event{{Data: " two"}}, io.EOF}, // only one space is stripped
		{"id: 1\nretry: 5\ndata: q\n\n", []Event{{Data: "q"}}, io.EOF},
		{"data: a\n\ndata: [DONE]\n\n", []Event{{Data: "a"}, {Data: "[DONE]"}}, io.EOF},
		{"da ta: x\n\n", nil, io.EOF},
		{"data: x:y\n\n", []Event{{Data: "x:y"}}, io.EOF},
		{"data: half\n", nil, io.ErrUnexpectedEOF},
		{"data: a\n\ndata: partial", []Event{{Data: "a"}}, io.ErrUnexpectedEOF},
		{"event: only\n", nil, io.ErrUnexpectedEOF},
		{"", nil, io.EOF},
	}
	for _, tc := range tests {
		for name, r := range map[string]io.Reader{
			"whole":    strings.NewReader(tc.in),
			"one byte": iotest.OneByteReader(strings.NewReader(tc.in)),
		} {
			evs, err := parseAll(r, 1024)
			if !eventsEqual(evs, tc.want) || err != tc.err {
				t.Errorf("%q (%s): got %q, %v; want %q, %v", tc.in, name, evs, err, tc.want, tc.err)
			}
		}
	}
}

func eventsEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSSELimit(t *testing.T) {
	_, err := parseAll(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 64)
	if !errors.Is(err, ErrLineTooLong) {
		t.Errorf("long line: %v", err)
	}
	// Many short data lines must not add up past the limit either.
	_, err = parseAll(strings.NewReader(strings.Repeat("data: xxxxxxxx\n", 20)+"\n"), 64)
	if !errors.Is(err, ErrLineTooLong) {
		t.Errorf("long event: %v", err)
	}
}

// An event must be returned as soon as its blank line arrives, even when
// that line ends in a CR whose possible LF has not arrived yet; waiting
// would add a network round to every token's timing.
func TestSSEDoesNotWaitPastTheEvent(t *testing.T) {
	for _, in := range []string{"data: a\n\n", "data: a\r\r", "data: a\r\n\r"} {
		pr, pw := io.Pipe()
		got := make(chan error, 1)
		go func() {
			_, err := NewSSEReader(pr, 1024).Next()
			got <- err
		}()
		go pw.Write([]byte(in))
		select {
		case err := <-got:
			if err != nil {
				t.Errorf("%q: %v", in, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("%q: Next still waiting for input after the event ended", in)
		}
		pw.Close()
	}
}

// refParse is a second, deliberately simple reading of the standard:
// normalise line endings, split, interpret. FuzzSSE holds the streaming
// parser to it.
func refParse(in []byte) ([]Event, error) {
	in = bytes.TrimPrefix(in, bom)
	s := strings.ReplaceAll(string(in), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	tail := lines[len(lines)-1] // not ended by a newline: never processed
	lines = lines[:len(lines)-1]
	var evs []Event
	var data []string
	hasData, name := false, ""
	for _, l := range lines {
		switch {
		case l == "":
			if hasData {
				evs = append(evs, Event{Name: name, Data: strings.Join(data, "\n")})
			}
			data, hasData, name = nil, false, ""
		case l[0] == ':':
		default:
			field, value, _ := strings.Cut(l, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "data":
				data, hasData = append(data, value), true
			case "event":
				name = value
			}
		}
	}
	if tail != "" || hasData || name != "" {
		return evs, io.ErrUnexpectedEOF
	}
	return evs, io.EOF
}

// FuzzSSE checks that the parser agrees with refParse, and that how the
// bytes are split across reads changes nothing.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: error\r\ndata: x\r\n\r\n"))
	f.Add([]byte("data: a\rdata: b\r\r: c\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		want, wantErr := refParse(in)
		for name, r := range map[string]io.Reader{
			"whole":    bytes.NewReader(in),
			"one byte": iotest.OneByteReader(bytes.NewReader(in)),
			"half":     iotest.HalfReader(bytes.NewReader(in)),
		} {
			evs, err := parseAll(r, 1<<20)
			if err != wantErr || !eventsEqual(evs, want) {
				t.Fatalf("%s: got %q, %v; reference %q, %v", name, evs, err, want, wantErr)
			}
			for _, ev := range evs {
				if strings.ContainsAny(ev.Name, "\r\n") || strings.ContainsRune(ev.Data, '\r') {
					t.Fatalf("line ending inside an event: %q", ev)
				}
			}
		}
	})
}
