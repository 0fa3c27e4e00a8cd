package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Expressions of the instrumented template (see instrument.go): each is
// written fully parenthesised, with guards around the operands that an
// operation reads in depth, and as a guard's call where a guard does the
// operation itself.

// builtinFilters are the engine's filters (v1.8.0's registerFilters).
// A filter by another name is a template's own callable (a macro), which
// the engine looks up among the variables and which may recurse: it is
// called through the call guard instead.
var builtinFilters = map[string]bool{
	"tojson": true, "from_json": true, "fromjson": true, "items": true, "join": true, "default": true, "d": true,
	"trim": true, "lower": true, "upper": true, "title": true, "capitalize": true, "first": true, "last": true,
	"length": true, "count": true, "reverse": true, "sort": true, "unique": true, "list": true, "int": true,
	"float": true, "string": true, "safe": true, "replace": true, "round": true, "abs": true, "map": true,
	"select": true, "reject": true, "selectattr": true, "rejectattr": true, "indent": true, "wordcount": true,
	"escape": true, "e": true, "dictsort": true, "max": true, "min": true, "sum": true, "batch": true,
}

// shallowFilters read no deeper than their input's top level, so their
// input needs no size check: checking a long conversation at every
// messages|length would cost more than the filter.
var shallowFilters = map[string]bool{
	"length": true, "count": true, "first": true, "last": true, "default": true, "d": true, "reverse": true,
	"items": true, "batch": true, "list": true, "int": true, "float": true, "abs": true, "round": true,
	"safe": true, "map": true,
}

// shallowTests look at their operand's type or truthiness only.
var shallowTests = map[string]bool{
	"defined": true, "undefined": true, "none": true, "boolean": true, "integer": true, "float": true,
	"number": true, "string": true, "mapping": true, "iterable": true, "sequence": true, "callable": true,
	"true": true, "false": true, "odd": true, "even": true,
}

// maxJSONIndent bounds tojson's indent, which the engine turns into a
// string of that many spaces before looking at the value.
const maxJSONIndent = 64

// paren wraps an emitted expression in parentheses unless it is a name or
// a literal other than a number: 0 .0 written without them would read as
// the float 0.0.
func paren(x expr, s string) string {
	switch x := x.(type) {
	case nameExpr:
		return s
	case litExpr:
		if !x.v.IsInt() && !x.v.IsFloat() {
			return s
		}
	}
	return "(" + s + ")"
}

// use wraps an operand that the operation will read in depth (print,
// compare, concatenate) in the use guard; literals, whose size the source
// bounds, go as they are.
func (e *emitter) use(x expr) (string, error) {
	s, err := e.expr(x)
	if err != nil {
		return "", err
	}
	if _, ok := x.(litExpr); ok {
		return s, nil
	}
	return "__bh_a(" + s + ")", nil
}

// args emits positional and keyword arguments, each with wrap (nil: as
// they are), comma-separated, with a leading comma when lead is set.
func (e *emitter) args(args []expr, kw []kwarg, wrap func(expr) (string, error), lead bool) (string, error) {
	if wrap == nil {
		wrap = e.expr
	}
	var parts []string
	for _, a := range args {
		s, err := wrap(a)
		if err != nil {
			return "", err
		}
		parts = append(parts, s)
	}
	for _, k := range kw {
		s, err := wrap(k.v)
		if err != nil {
			return "", err
		}
		parts = append(parts, k.name+"="+s)
	}
	s := strings.Join(parts, ", ")
	if lead && s != "" {
		s = ", " + s
	}
	return s, nil
}

func (e *emitter) expr(x expr) (string, error) {
	switch x := x.(type) {
	case litExpr:
		return lit(x.v)
	case nameExpr:
		if strings.HasPrefix(x.name, guardPrefix) {
			return "", fmt.Errorf("the name %s is reserved", x.name)
		}
		return x.name, nil
	case attrExpr:
		o, err := e.expr(x.obj)
		if err != nil {
			return "", err
		}
		return paren(x.obj, o) + "." + x.name, nil
	case itemExpr:
		o, err := e.expr(x.obj)
		if err != nil {
			return "", err
		}
		k, err := e.use(x.key) // a dict key is printed
		if err != nil {
			return "", err
		}
		return paren(x.obj, o) + "[" + k + "]", nil
	case sliceExpr:
		o, err := e.expr(x.obj)
		if err != nil {
			return "", err
		}
		var b [3]string
		for i, part := range []expr{x.start, x.stop, x.step} {
			if part == nil {
				continue
			}
			s, err := e.expr(part)
			if err != nil {
				return "", err
			}
			b[i] = "__bh_ix(" + s + ")"
		}
		s := paren(x.obj, o) + "[" + b[0] + ":" + b[1]
		if x.step != nil {
			s += ":" + b[2]
		}
		return s + "]", nil
	case unaryExpr:
		o, err := e.expr(x.x)
		if err != nil {
			return "", err
		}
		if x.op == "not" {
			return "(not " + paren(x.x, o) + ")", nil
		}
		return "(" + x.op + paren(x.x, o) + ")", nil
	case binExpr:
		return e.binary(x)
	case condExpr:
		t, err := e.expr(x.t)
		if err != nil {
			return "", err
		}
		c, err := e.expr(x.c)
		if err != nil {
			return "", err
		}
		s := "(" + paren(x.t, t) + " if " + paren(x.c, c)
		if x.f != nil {
			f, err := e.expr(x.f)
			if err != nil {
				return "", err
			}
			s += " else " + paren(x.f, f)
		}
		return s + ")", nil
	case callExpr:
		return e.call(x)
	case filterExpr:
		return e.filter(x)
	case testExpr:
		if !identRE.MatchString(x.name) {
			return "", fmt.Errorf("a test named %q", x.name)
		}
		wrap := e.use
		if shallowTests[x.name] {
			wrap = e.expr
		}
		o, err := wrap(x.x)
		if err != nil {
			return "", err
		}
		s := "(" + paren(x.x, o) + " is "
		if x.neg {
			s += "not "
		}
		s += x.name
		if len(x.args) > 0 {
			a, err := e.args(x.args, nil, e.use, false)
			if err != nil {
				return "", err
			}
			s += "(" + a + ")"
		}
		return s + ")", nil
	case listExpr:
		a, err := e.args(x.items, nil, nil, false)
		if err != nil {
			return "", err
		}
		return "[" + a + "]", nil
	case dictExpr:
		var parts []string
		for i := range x.keys {
			k, err := e.use(x.keys[i]) // printed into the key
			if err != nil {
				return "", err
			}
			v, err := e.expr(x.vals[i])
			if err != nil {
				return "", err
			}
			parts = append(parts, k+": "+v)
		}
		// " }": a "}}" would end an output tag early.
		return "{" + strings.Join(parts, ", ") + " }", nil
	}
	return "", fmt.Errorf("an expression of type %T", x)
}

func (e *emitter) binary(x binExpr) (string, error) {
	switch x.op {
	case "and", "or", "-", "/", "//", "%", "**":
		// and/or only test truthiness; the rest convert to numbers.
		l, err := e.expr(x.l)
		if err != nil {
			return "", err
		}
		r, err := e.expr(x.r)
		if err != nil {
			return "", err
		}
		return "(" + paren(x.l, l) + " " + x.op + " " + paren(x.r, r) + ")", nil
	case "*":
		l, err := e.expr(x.l)
		if err != nil {
			return "", err
		}
		r, err := e.expr(x.r)
		if err != nil {
			return "", err
		}
		return "__bh_mul(" + l + ", " + r + ")", nil
	case "~", "+", "==", "!=", "<", ">", "<=", ">=", "in", "not in":
		l, err := e.use(x.l)
		if err != nil {
			return "", err
		}
		r, err := e.use(x.r)
		if err != nil {
			return "", err
		}
		return "(" + paren(x.l, l) + " " + x.op + " " + paren(x.r, r) + ")", nil
	}
	return "", fmt.Errorf("an operator %q", x.op)
}

func (e *emitter) call(x callExpr) (string, error) {
	if a, ok := x.fn.(attrExpr); ok && (a.name == "replace" || a.name == "format") {
		// str.replace and str.format make strings of any size from
		// small ones; the guard does what they do, after a size check.
		o, err := e.expr(a.obj)
		if err != nil {
			return "", err
		}
		rest, err := e.args(x.args, x.kw, nil, true)
		if err != nil {
			return "", err
		}
		return "__bh_s" + a.name + "(" + o + rest + ")", nil
	}
	fn, err := e.expr(x.fn)
	if err != nil {
		return "", err
	}
	rest, err := e.args(x.args, x.kw, nil, true)
	if err != nil {
		return "", err
	}
	return "__bh_call(" + quote(callableName(x.fn)) + ", " + fn + rest + ")", nil
}

func (e *emitter) filter(x filterExpr) (string, error) {
	if !builtinFilters[x.name] {
		if !identRE.MatchString(x.name) || strings.HasPrefix(x.name, guardPrefix) {
			return "", fmt.Errorf("a filter named %q", x.name)
		}
		in, err := e.expr(x.x)
		if err != nil {
			return "", err
		}
		rest, err := e.args(x.args, x.kw, nil, true)
		if err != nil {
			return "", err
		}
		return "__bh_call(" + quote(x.name) + ", " + x.name + ", " + in + rest + ")", nil
	}
	switch x.name {
	case "indent", "replace", "join":
		in, err := e.expr(x.x)
		if err != nil {
			return "", err
		}
		rest, err := e.args(x.args, x.kw, nil, true)
		if err != nil {
			return "", err
		}
		return "__bh_f" + x.name + "(" + in + rest + ")", nil
	case "tojson":
		indent, seps, err := jsonArgs(x.kw)
		if err != nil {
			return "", err
		}
		in, err := e.expr(x.x)
		if err != nil {
			return "", err
		}
		a, err := e.args(x.args, x.kw, nil, false)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("(__bh_json(%s, %d, %d)|tojson(%s))", in, indent, seps, a), nil
	}
	wrap := e.use
	if shallowFilters[x.name] {
		wrap = e.expr
	}
	in, err := wrap(x.x)
	if err != nil {
		return "", err
	}
	s := paren(x.x, in) + "|" + x.name
	if len(x.args) > 0 || len(x.kw) > 0 {
		a, err := e.args(x.args, x.kw, wrap, false)
		if err != nil {
			return "", err
		}
		s += "(" + a + ")"
	}
	return "(" + s + ")", nil
}

// jsonArgs reads tojson's indent and separators, which must be constants
// the guard can account for: the indent string and the separators are
// written once per item of the value.
func jsonArgs(kw []kwarg) (indent, seps int, err error) {
	for _, k := range kw {
		switch k.name {
		case "indent":
			l, ok := k.v.(litExpr)
			if !ok || !(l.v.IsInt() || l.v.IsFloat() || l.v.IsBool() || l.v.IsNone()) {
				return 0, 0, fmt.Errorf("tojson's indent is not a number written in the template")
			}
			if n := toInt64(l.v); n > maxJSONIndent {
				return 0, 0, fmt.Errorf("tojson's indent %d is over %d", n, maxJSONIndent)
			} else if n > 0 {
				indent = int(n)
			}
		case "separators":
			l, ok := k.v.(listExpr)
			if !ok {
				return 0, 0, fmt.Errorf("tojson's separators are not written in the template")
			}
			for _, it := range l.items {
				s, ok := it.(litExpr)
				if !ok || !s.v.IsString() {
					return 0, 0, fmt.Errorf("tojson's separators are not strings written in the template")
				}
				seps += len(s.v.AsString())
			}
		}
	}
	return indent, seps, nil
}

// plain writes a macro parameter's default, which the engine's macro
// header parser splits on commas and never sees guarded: only constants
// and plain names are kept.
func plain(x expr) (string, error) {
	switch x := x.(type) {
	case litExpr:
		return lit(x.v)
	case nameExpr:
		return x.name, nil
	case attrExpr:
		o, err := plain(x.obj)
		return o + "." + x.name, err
	case unaryExpr:
		if l, ok := x.x.(litExpr); ok && (x.op == "-" || x.op == "+") {
			s, err := lit(l.v)
			return x.op + s, err
		}
	case listExpr:
		if len(x.items) == 0 {
			return "[]", nil
		}
	case dictExpr:
		if len(x.keys) == 0 {
			return "{}", nil
		}
	}
	return "", fmt.Errorf("not a constant")
}

// lit writes a literal so that the engine's tokenizer reads it back as the
// same value.
func lit(v jinja.Value) (string, error) {
	switch {
	case v.IsNone():
		return "none", nil
	case v.IsBool():
		return strconv.FormatBool(v.AsBool()), nil
	case v.IsInt() && v.AsInt() >= 0:
		return strconv.FormatInt(v.AsInt(), 10), nil
	case v.IsFloat() && math.IsInf(v.AsFloat(), 1):
		return "1.0e999", nil // a literal too large for a float64 is +Inf
	case v.IsFloat() && v.AsFloat() >= 0 && !math.IsNaN(v.AsFloat()):
		// The tokenizer wants digits, a point and digits, then an
		// optional exponent: "1e+21" would be an int and a name.
		s := strconv.FormatFloat(v.AsFloat(), 'e', -1, 64)
		mant, exp, _ := strings.Cut(s, "e")
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		return mant + "e" + exp, nil
	case v.IsString():
		return quote(v.AsString()), nil
	}
	return "", fmt.Errorf("a literal %s", v.String())
}

// quote writes s as a single-quoted string literal: the tokenizer keeps
// every byte but a backslash or a quote as it is.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// callableName names a callee in an error, as the engine does.
func callableName(x expr) string {
	switch x := x.(type) {
	case nameExpr:
		return x.name
	case attrExpr:
		return callableName(x.obj) + "." + x.name
	case itemExpr:
		return callableName(x.obj) + "[item]"
	}
	return "an expression"
}
