package tokenizer

import "unicode/utf8"

// Piece returns the raw bytes of a token's text: a byte token gives its byte, SentencePiece's
// '▁' reads as ' ', byte-level pieces are mapped back to their bytes, and special tokens give
// their text (such as "<|eot_id|>"). An id outside the vocabulary gives nil. The result must not
// be modified.
func (t *Tokenizer) Piece(id int) []byte {
	if id < 0 || id >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// PieceText is Piece as a valid string: one U+FFFD for each byte that does not begin a valid
// character (a byte token's lone byte, say), as Decode writes such bytes. The API names tokens
// with it where JSON needs text.
func (t *Tokenizer) PieceText(id int) string { return sanitize(t.Piece(id)) }

// render is the piece as Decode shows it after token prev: control, unknown and unused tokens
// show nothing (as llama.cpp without special=true), and a SentencePiece piece right after BOS
// loses the space that encoding prefixed. At the start of ids without BOS the space stays: such
// ids are usually a continuation (a completion), whose leading space is real text.
func (t *Tokenizer) render(id, prev int) []byte {
	if id < 0 || id >= len(t.pieces) || t.hidden[id] {
		return nil
	}
	p := t.pieces[id]
	if t.spec.AddSpacePrefix && t.spec.Model == ModelLlama && prev >= 0 && prev == t.spec.BOS &&
		len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	return p
}

// Decode turns ids into text, as DecodeAfter(-1, ids). Bytes that do not form valid UTF-8 become U+FFFD, one per byte
// that cannot start a complete character, exactly as a Decoder fed the same ids would emit.
func (t *Tokenizer) Decode(ids []int) string { return t.DecodeAfter(-1, ids) }

// DecodeAfter decodes ids that follow token prev (-1: nothing), so that a completion decoded
// after its prompt's BOS drops the SentencePiece space prefix just as a Decoder would.
func (t *Tokenizer) DecodeAfter(prev int, ids []int) string {
	var buf []byte
	for _, id := range ids {
		buf = append(buf, t.render(id, prev)...)
		prev = id
	}
	return sanitize(buf)
}

// sanitize turns bytes into a valid string, replacing each byte that does not begin a valid
// character with U+FFFD.
func sanitize(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return string(out)
}

// Decoder turns a stream of ids into text that never splits a UTF-8 character: bytes of an
// incomplete character are held until the rest arrives, and bytes that can no longer complete
// one are emitted as U+FFFD. The concatenation of everything Add and Flush return equals Decode
// of the same ids (with the same prev). A Decoder is not safe for concurrent use.
type Decoder struct {
	t       *Tokenizer
	prev    int
	pending []byte
}

// NewDecoder starts a stream. prev is the token before the first one fed (the last prompt
// token, or BOS), which decides whether a SentencePiece piece drops its leading space; -1 means
// none.
func (t *Tokenizer) NewDecoder(prev int) *Decoder {
	return &Decoder{t: t, prev: prev}
}

// Add feeds one id and returns the text it completes, possibly "".
func (d *Decoder) Add(id int) string {
	d.pending = append(d.pending, d.t.render(id, d.prev)...)
	d.prev = id
	// Emit every character whose bytes are all here. utf8.FullRune is false only for a valid
	// but unfinished prefix; a decision made on a full rune never changes with later bytes, which
	// is what keeps the stream equal to Decode.
	i := 0
	for i < len(d.pending) && utf8.FullRune(d.pending[i:]) {
		_, n := utf8.DecodeRune(d.pending[i:])
		i += n
	}
	if i == 0 {
		return ""
	}
	s := sanitize(d.pending[:i])
	d.pending = append(d.pending[:0], d.pending[i:]...)
	return s
}

// Flush returns held bytes of a character that will not be completed, as U+FFFD each.
func (d *Decoder) Flush() string {
	s := sanitize(d.pending)
	d.pending = d.pending[:0]
	return s
}
