package audit

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// content gathers everything a response body carried, for the searches
// of the canaries and error-echo checks, whatever field or encoding the
// server put it in:
//   - every JSON string value, decoded (so "\u0063" is "c"), at any depth
//     and under any key but an identifier's (skipKey);
//   - the values at one JSON path concatenated across a stream's events,
//     so that a marker split across chunks of any field is whole again;
//   - the raw text of whatever is not JSON: a body, an event's data, a
//     line of a stream that is no SSE field.
//
// The pieces of an error (an "error" object, an error event, the body of a
// non-2xx response) are also kept apart, for the error-echo check.
type content struct {
	paths map[string]*piece
	order []string
}

// piece is the strings at one path. They are kept apart, not copied
// into one, so that a body kept whole elsewhere (Result.Unparsed) shares
// its memory with the content.
type piece struct {
	parts   []string
	inError bool
}

// body adds one JSON document, or s raw when it is not JSON; inError
// marks all of it as an error's.
func (c *content) body(s string, inError bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		c.raw(s, inError)
		return
	}
	c.walk(v, "$", inError)
}

// raw adds s as text of its own.
func (c *content) raw(s string, inError bool) {
	c.add("raw:"+strconv.Itoa(len(c.order)), s, inError)
}

// strayLines adds the lines of an event stream that are no SSE field:
// comments, and whatever a server or proxy wrote between the events.
func (c *content) strayLines(b string) {
	for _, line := range strings.FieldsFunc(b, func(r rune) bool { return r == '\n' || r == '\r' }) {
		field, _, _ := strings.Cut(line, ":")
		switch strings.TrimPrefix(field, "\ufeff") {
		case "data", "event", "id", "retry":
			continue
		}
		c.raw(line, false)
	}
}

func (c *content) walk(v any, path string, inError bool) {
	switch x := v.(type) {
	case string:
		c.add(path, x, inError)
	case []any:
		for i, e := range x {
			c.walk(e, path+"["+strconv.Itoa(i)+"]", inError)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !skipKey(k) {
				c.walk(x[k], path+"."+strconv.Quote(k), inError || k == "error")
			}
		}
	}
}

// skipKey says which values are identifiers, not content: a random id's
// hex digits would otherwise match a marker's by chance.
func skipKey(k string) bool {
	return k == "id" || strings.HasSuffix(k, "_id") || k == "system_fingerprint"
}

func (c *content) add(path, s string, inError bool) {
	if s == "" {
		return
	}
	if c.paths == nil {
		c.paths = map[string]*piece{}
	}
	p := c.paths[path]
	if p == nil {
		p = &piece{}
		c.paths[path] = p
		c.order = append(c.order, path)
	}
	p.parts = append(p.parts, s)
	p.inError = p.inError || inError
}

// text returns all the content, and the error part of it, one piece a
// line, in the order the pieces first appeared.
func (c *content) text() (all, errs string) {
	var a, e []string
	for _, path := range c.order {
		p := c.paths[path]
		s := strings.Join(p.parts, "")
		a = append(a, s)
		if p.inError {
			e = append(e, s)
		}
	}
	all = strings.Join(a, "\n")
	if len(e) == len(a) {
		return all, all // all of it is an error's: one string
	}
	return all, strings.Join(e, "\n")
}
