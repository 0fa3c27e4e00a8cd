package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// The strict field check. encoding/json matches object keys to struct
// fields case-insensitively, so {"MAX_TOKENS": 5} would set max_tokens,
// and its unknown-field error names only the last key. OpenAI refuses a
// name it does not know exactly and names the field by its whole path
// (messages[0].foo). So before the typed decode, one pass over the body
// compares every key the server interprets with the names the request
// types declare, byte for byte, and reports the first stranger by path.
//
// The pass is linear in the body (which the server already caps) and its
// recursion is bounded by the depth of the request types, not of the
// body: values the server does not interpret (a JSON schema, tools,
// metadata) are skipped without looking inside.

// shape is what the strict check knows of a value. A nil *shape is the
// client's own data: anything goes there, and it is skipped unread.
type shape struct {
	// fields, for a struct, maps each exact JSON name to its value's shape.
	fields map[string]*shape
	// mapValues, for a map, is true: any key, values of shape elem.
	mapValues bool
	// elem is the shape of array elements (or of map values).
	elem *shape
}

// messageContent is a chat message's content as sent: a string or an
// array of parts, read by contentText. The strict check gives it the shape
// of []contentPart.
type messageContent json.RawMessage

// UnmarshalJSON keeps the raw value, as json.RawMessage does.
func (m *messageContent) UnmarshalJSON(b []byte) error {
	*m = append((*m)[:0], b...)
	return nil
}

// MarshalJSON writes the raw value back, as json.RawMessage does.
func (m messageContent) MarshalJSON() ([]byte, error) { return json.RawMessage(m).MarshalJSON() }

var shapes sync.Map // reflect.Type → *shape

// shapeFor is the shape of the value v points to, built once per type.
func shapeFor(v any) *shape {
	t := reflect.TypeOf(v)
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s, _ := shapes.LoadOrStore(t, shapeOf(t))
	return s.(*shape)
}

// shapeOf follows encoding/json's reading of a Go type: tag names,
// untagged exported fields under their Go name, embedded structs
// flattened. The request types are not recursive, so neither is this.
func shapeOf(t reflect.Type) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[json.RawMessage]():
		return nil
	case t == reflect.TypeFor[messageContent]():
		return shapeOf(reflect.TypeFor[[]contentPart]())
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &shape{fields: map[string]*shape{}}
		addFields(s, t)
		return s
	case reflect.Map:
		if e := shapeOf(t.Elem()); e != nil {
			return &shape{mapValues: true, elem: e}
		}
	case reflect.Slice, reflect.Array:
		if e := shapeOf(t.Elem()); e != nil {
			return &shape{elem: e}
		}
	}
	return nil // a scalar: its type is the typed decode's to check
}

func addFields(s *shape, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(s, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.fields[name] = shapeOf(f.Type)
	}
}

// checkFields reports the first key in data, a valid JSON value, that s
// does not name exactly, as an unknown_parameter error with its path.
func checkFields(data []byte, s *shape) *errkind.Error {
	w := walker{data: data}
	w.space()
	if !w.value(s) {
		return nil
	}
	path := w.path()
	msg := fmt.Sprintf("unknown parameter %q; see docs/api.md for the supported fields", path)
	if w.near != "" {
		msg = fmt.Sprintf("unknown parameter %q (names are case-sensitive: did you mean %q?); see docs/api.md for the supported fields", path, w.near)
	}
	return badInput(path, "unknown_parameter", "%s", msg)
}

// walker scans a valid JSON document. On finding an unknown key it stops
// with the path to it on its stack.
type walker struct {
	data  []byte
	pos   int
	stack []step
	near  string // a known name that differs from the bad key only in case
}

// step is one level of a path: an object key, or an array index (key nil).
type step struct {
	key   []byte
	index int
}

// value walks the value at pos under s; true means an unknown key was found.
func (w *walker) value(s *shape) bool {
	if s == nil {
		w.skip()
		return false
	}
	switch w.data[w.pos] {
	case '{':
		if s.fields == nil && !s.mapValues {
			break // not an object here: a type error for the typed decode
		}
		return w.object(s)
	case '[':
		if s.fields != nil || s.mapValues || s.elem == nil {
			break
		}
		return w.array(s.elem)
	}
	w.skip()
	return false
}

func (w *walker) object(s *shape) bool {
	w.pos++ // {
	w.space()
	if w.data[w.pos] == '}' {
		w.pos++
		return false
	}
	for {
		key := w.key()
		w.space()
		w.pos++ // :
		w.space()
		var vs *shape
		if s.mapValues {
			vs = s.elem
		} else {
			fs, ok := s.fields[string(key)]
			if !ok {
				w.stack = append(w.stack, step{key: key})
				for name := range s.fields {
					if strings.EqualFold(name, string(key)) {
						w.near = name
					}
				}
				return true
			}
			vs = fs
		}
		w.stack = append(w.stack, step{key: key})
		if w.value(vs) {
			return true
		}
		w.stack = w.stack[:len(w.stack)-1]
		w.space()
		if w.data[w.pos] == '}' {
			w.pos++
			return false
		}
		w.pos++ // ,
		w.space()
	}
}

func (w *walker) array(elem *shape) bool {
	w.pos++ // [
	w.space()
	if w.data[w.pos] == ']' {
		w.pos++
		return false
	}
	for i := 0; ; i++ {
		w.stack = append(w.stack, step{index: i})
		if w.value(elem) {
			return true
		}
		w.stack = w.stack[:len(w.stack)-1]
		w.space()
		if w.data[w.pos] == ']' {
			w.pos++
			return false
		}
		w.pos++ // ,
		w.space()
	}
}

// key reads an object key at pos and returns its text as encoding/json
// reads it: unescaped, invalid UTF-8 replaced. A plain key is a slice of
// data, so the common case allocates nothing.
func (w *walker) key() []byte {
	start := w.pos
	w.str()
	raw := w.data[start+1 : w.pos-1] // never nil: nil marks an index
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw
	}
	var s string
	_ = json.Unmarshal(w.data[start:w.pos], &s) // valid: checked before the walk
	return []byte(s)
}

// str moves pos past the string that starts at pos.
func (w *walker) str() {
	w.pos++ // opening quote
	for {
		switch w.data[w.pos] {
		case '\\':
			w.pos += 2
		case '"':
			w.pos++
			return
		default:
			w.pos++
		}
	}
}

// skip moves pos past the value at pos without recursion, however deep it
// is nested.
func (w *walker) skip() {
	if c := w.data[w.pos]; c != '"' && c != '{' && c != '[' {
		// A number, true, false or null: it ends at a delimiter.
		for w.pos < len(w.data) && !isDelim(w.data[w.pos]) {
			w.pos++
		}
		return
	}
	depth := 0
	for {
		switch w.data[w.pos] {
		case '"':
			w.str()
		case '{', '[':
			depth++
			w.pos++
		case '}', ']':
			depth--
			w.pos++
		default: // scalars, colons, commas and spaces inside
			w.pos++
		}
		if depth == 0 {
			return
		}
	}
}

func isDelim(c byte) bool { return c == ',' || c == '}' || c == ']' || isSpace(c) }

func (w *walker) space() {
	for w.pos < len(w.data) && isSpace(w.data[w.pos]) {
		w.pos++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// path writes the stack as OpenAI does: messages[0].content[1].foo. An
// empty key is written "" so that the path is never empty.
func (w *walker) path() string {
	var b strings.Builder
	for i, st := range w.stack {
		switch {
		case st.key == nil:
			fmt.Fprintf(&b, "[%d]", st.index)
			continue
		case i > 0:
			b.WriteByte('.')
		}
		if len(st.key) == 0 {
			b.WriteString(`""`)
		} else {
			b.Write(st.key)
		}
	}
	return b.String()
}
