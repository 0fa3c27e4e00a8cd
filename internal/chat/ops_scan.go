package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Operations whose cost is not the size of their operands but a product
// of two of them, which one step for the call and a step per 4 KiB of
// operand (the use guard) would leave uncounted, so that one call ran for
// longer than a render may: trimming a string by a set of characters
// that is not ASCII (the engine looks each character up in the set), and
// selecting from a list by a test with an argument (it tests each item
// against the argument). Each is counted here, then done as the engine
// does it. from_json and split are here too: their values take up to
// fifty times the bytes of their text, before any guard sees them.

// bulk counts the n steps of one operation that runs without a guard
// until it is done, so that the clock cannot stop it halfway: one that
// would take more than a 32nd of the render's steps (seconds) is refused
// before it starts.
func (st *account) bulk(n int64) error {
	if n > st.lim.Steps>>5 {
		return st.fail("one operation would take %d steps, more than a render may take at once", n)
	}
	return st.step(n)
}

// engineFilters are the engine's own select, reject, selectattr and
// rejectattr, which filterEach calls after counting their cost. The engine
// keeps its filters unexported, in its scope of builtins, under the names
// read here; a template cannot reach that scope's copies once the guard
// holds them. Missing ones (an engine that names them otherwise) make the
// guard fail, and TestEngineFilters fail.
var engineFilters = grabFilters("select", "reject", "selectattr", "rejectattr")

func grabFilters(names ...string) map[string]jinja.Value {
	out := map[string]jinja.Value{}
	refs := make([]string, len(names))
	for i, n := range names {
		refs[i] = "__filter_" + n
	}
	tmpl, err := jinja.Compile("{{ grab(" + strings.Join(refs, ", ") + ") }}")
	if err != nil {
		return out
	}
	_, _ = tmpl.RenderValues(map[string]jinja.Value{"grab": jinja.NewCallable("grab", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		for i, n := range names {
			if i < len(args) && args[i].IsCallable() {
				out[n] = args[i]
			}
		}
		return jinja.Undefined(), nil
	})})
	return out
}

// filterEach is the select, reject, selectattr or rejectattr filter:
// items|select(test, arg...) tests each item against the arguments.
func (st *account) filterEach(name string) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
		var against int64
		for i, a := range args {
			w, err := st.check(a)
			if err != nil {
				return jinja.Undefined(), err
			}
			if i > 0 {
				against = satAdd(against, w.flat)
			}
		}
		if err := st.uses(nil, kw); err != nil {
			return jinja.Undefined(), err
		}
		if len(args) > 0 {
			if err := st.bulk(satMul(extent(args[0]), against) >> 12); err != nil {
				return jinja.Undefined(), err
			}
		}
		f, ok := engineFilters[name]
		if !ok {
			return jinja.Undefined(), fmt.Errorf("%s: this server cannot call the template engine's filter", name)
		}
		return f.AsCallable().Fn(args, kw)
	}
}

// trimCost counts the steps of trimming s by the characters of cutset:
// the engine scans cutset for each character it trims, unless cutset is
// ASCII.
func (st *account) trimCost(s, cutset string) error {
	for i := 0; i < len(cutset); i++ {
		if cutset[i] >= 0x80 {
			return st.bulk(satMul(int64(len(s)), int64(len(cutset))) >> 12)
		}
	}
	return nil
}

// filterTrim is the trim filter: s|trim, or s|trim(chars).
func (st *account) filterTrim(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	s := printValue(args[0])
	if len(args) == 1 {
		return jinja.NewString(strings.TrimSpace(s)), nil
	}
	chars := printValue(args[1])
	if err := st.trimCost(s, chars); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(strings.Trim(s, chars)), nil
}

// isBlank is what the engine's lstrip and rstrip trim with no argument.
func isBlank(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// stringTrim is s.strip(chars), s.lstrip(chars) or s.rstrip(chars).
func (st *account) stringTrim(name string) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
		if err := st.uses(args, kw); err != nil {
			return jinja.Undefined(), err
		}
		obj, args := args[0], args[1:]
		if !obj.IsString() {
			return st.method(obj, name, args, kw)
		}
		s := obj.AsString()
		if len(args) == 0 {
			switch name {
			case "strip":
				return jinja.NewString(strings.TrimSpace(s)), nil
			case "lstrip":
				return jinja.NewString(strings.TrimLeftFunc(s, isBlank)), nil
			}
			return jinja.NewString(strings.TrimRightFunc(s, isBlank)), nil
		}
		chars := printValue(args[0])
		if err := st.trimCost(s, chars); err != nil {
			return jinja.Undefined(), err
		}
		switch name {
		case "strip":
			return jinja.NewString(strings.Trim(s, chars)), nil
		case "lstrip":
			return jinja.NewString(strings.TrimLeft(s, chars)), nil
		}
		return jinja.NewString(strings.TrimRight(s, chars)), nil
	}
}

// stringSplit is s.split() or s.split(sep): a list of the parts, some
// fifty bytes each however short, which must fit in what the render may
// still keep (split(”) makes a part of every character).
func (st *account) stringSplit(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	obj, args := args[0], args[1:]
	if !obj.IsString() {
		return st.method(obj, "split", args, kw)
	}
	s := obj.AsString()
	var parts []string
	if len(args) == 0 {
		if err := st.room(satMul(int64(len(s)/2+1), nodeMem)); err != nil {
			return jinja.Undefined(), err
		}
		parts = strings.Fields(s)
	} else {
		sep := printValue(args[0])
		n := utf8.RuneCountInString(s)
		if sep != "" {
			n = strings.Count(s, sep) + 1
		}
		if err := st.room(satMul(int64(n), nodeMem)); err != nil {
			return jinja.Undefined(), err
		}
		parts = strings.Split(s, sep)
	}
	items := make([]jinja.Value, len(parts))
	for i, p := range parts {
		items[i] = jinja.NewString(p)
	}
	return jinja.NewList(items), nil
}

// filterFromJSON is the from_json (fromjson) filter. Each value of the
// JSON text, a few bytes of it, becomes a jinja.Value and the Go value it
// is decoded from: the decoding may hold no more than the render may.
func (st *account) filterFromJSON(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), nil
	}
	s := args[0].AsString()
	values := int64(1 + strings.Count(s, ",") + strings.Count(s, ":") + strings.Count(s, "[") + strings.Count(s, "{"))
	if err := st.room(satAdd(int64(len(s)), satMul(values, 2*nodeMem))); err != nil {
		return jinja.Undefined(), err
	}
	var result any
	if err := json.Unmarshal([]byte(s), &result); err != nil {
		return jinja.Undefined(), fmt.Errorf("fromjson: %w", err)
	}
	return jinja.FromGoValue(result), nil
}
