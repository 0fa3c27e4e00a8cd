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
// messages|length would cost more than the filter. Those marked true
// still walk that level once (|length counts a string's characters, |int
// parses it), and so go through the cost guard. batch is not among them:
// each |batch(1) wraps every item of its input in a list of its own, so
// a chain of them builds a million lists at each link.
var shallowFilters = map[string]bool{
	"length": true, "count": true, "reverse": true, "items": true, "list": true, "int": true, "float": true,
	"round": true, "map": true, "first": false, "last": false, "default": false, "d": false, "abs": false,
	"safe": false,
}

// guardedMethods are the string methods a guard does in the engine's
// stead: str.replace and str.format make strings of any size from small
// ones, strip, lstrip and rstrip by characters that are not ASCII take
// time in the product of two lengths, and split makes a list of fifty
// bytes a character.
var guardedMethods = map[string]bool{"replace": true, "format": true, "strip": true, "lstrip": true, "rstrip": true, "split": true}

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

// rawExpr is a name of the rewrite's own (a guard's variable), written as
// it is: a template's own names never begin with guardPrefix.
type rawExpr struct{ s string }

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

// walked emits an operand that the engine walks once without a guard, in
// the cost guard.
func (e *emitter) walked(x expr) (string, error) {
	s, err := e.expr(x)
	if err != nil {
		return "", err
	}
	return costly(x, s), nil
}

// listed emits the input of |list in its cost guard (held.go).
func (e *emitter) listed(x expr) (string, error) {
	s, err := e.expr(x)
	return "__bh_ol(" + s + ")", err
}

// operands are the emitted arguments of one operation: their expressions
// and texts in the order the engine evaluates them, and the keyword each
// is passed by ("" for a positional one).
type operands struct {
	xs    []expr
	ss    []string
	names []string
}

// add emits x with emit (nil: as it is) and appends it, passed by name.
func (e *emitter) add(o *operands, x expr, name string, emit func(expr) (string, error)) error {
	if emit == nil {
		emit = e.expr
	}
	s, err := emit(x)
	if err != nil {
		return err
	}
	o.xs, o.ss, o.names = append(o.xs, x), append(o.ss, s), append(o.names, name)
	return nil
}

// addArgs appends positional and keyword arguments, each with emit.
func (e *emitter) addArgs(o *operands, args []expr, kw []kwarg, emit func(expr) (string, error)) error {
	for _, a := range args {
		if err := e.add(o, a, "", emit); err != nil {
			return err
		}
	}
	for _, k := range kw {
		if err := e.add(o, k.v, k.name, emit); err != nil {
			return err
		}
	}
	return nil
}

// join writes operands from the i-th on, comma-separated.
func (o *operands) join(i int) string {
	var parts []string
	for ; i < len(o.ss); i++ {
		if o.names[i] != "" {
			parts = append(parts, o.names[i]+"="+o.ss[i])
		} else {
			parts = append(parts, o.ss[i])
		}
	}
	return strings.Join(parts, ", ")
}

func (e *emitter) expr(x expr) (string, error) {
	switch x := x.(type) {
	case litExpr:
		return lit(x.v)
	case rawExpr:
		return x.s, nil
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
		// Indexing a string decodes all of it: the object costs.
		var o operands
		if err := e.add(&o, x.obj, "", e.walked); err != nil {
			return "", err
		}
		if err := e.add(&o, x.key, "", e.use); err != nil { // a dict key is printed
			return "", err
		}
		held := holds(o.xs, o.ss, false)
		return release(o.ss[0]+"["+o.ss[1]+"]", held), nil
	case sliceExpr:
		var o operands
		if err := e.add(&o, x.obj, "", e.walked); err != nil {
			return "", err
		}
		// The engine evaluates step, start and stop, in that order, and
		// keeps only the numbers.
		var b [3]string
		for i, part := range []expr{x.step, x.start, x.stop} {
			if part == nil {
				continue
			}
			s, err := e.expr(part)
			if err != nil {
				return "", err
			}
			b[i] = "__bh_ix(" + s + ")"
			o.xs, o.ss, o.names = append(o.xs, part), append(o.ss, b[i]), append(o.names, "")
		}
		obj := o.ss[0]
		held := holds(o.xs, o.ss, false) && o.ss[0] != obj
		s := o.ss[0] + "[" + b[1] + ":" + b[2]
		if x.step != nil {
			s += ":" + b[0]
		}
		return release(s+"]", held), nil
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
		var o operands
		emit := e.use
		if shallowTests[x.name] {
			emit = e.expr
		}
		if err := e.add(&o, x.x, "", emit); err != nil {
			return "", err
		}
		if err := e.addArgs(&o, x.args, nil, e.use); err != nil {
			return "", err
		}
		held := holds(o.xs, o.ss, false)
		s := "(" + paren(x.x, o.ss[0]) + " is "
		if x.neg {
			s += "not "
		}
		s += x.name
		if len(x.args) > 0 {
			s += "(" + o.join(1) + ")"
		}
		return release(s+")", held), nil
	case listExpr:
		var o operands
		if err := e.addArgs(&o, x.items, nil, nil); err != nil {
			return "", err
		}
		held := holds(o.xs, o.ss, false)
		return release("["+o.join(0)+"]", held), nil
	case dictExpr:
		var o operands
		for i := range x.keys {
			if err := e.add(&o, x.keys[i], "", e.use); err != nil { // printed into the key
				return "", err
			}
			if err := e.add(&o, x.vals[i], "", nil); err != nil {
				return "", err
			}
		}
		held := holds(o.xs, o.ss, false)
		var parts []string
		for i := 0; i < len(o.ss); i += 2 {
			parts = append(parts, o.ss[i]+": "+o.ss[i+1])
		}
		// " }": a "}}" would end an output tag early.
		return release("{"+strings.Join(parts, ", ")+" }", held), nil
	}
	return "", fmt.Errorf("an expression of type %T", x)
}

func (e *emitter) binary(x binExpr) (string, error) {
	var emit func(expr) (string, error)
	switch x.op {
	case "and", "or":
		// They only test truthiness, and the engine evaluates the right
		// operand only after it has done with the left.
		l, err := e.expr(x.l)
		if err != nil {
			return "", err
		}
		r, err := e.expr(x.r)
		if err != nil {
			return "", err
		}
		return "(" + paren(x.l, l) + " " + x.op + " " + paren(x.r, r) + ")", nil
	case "-", "/", "//", "%", "**":
		emit = e.walked // they parse a string operand as a number
	case "*":
		emit = e.expr
	case "~", "+", "==", "!=", "<", ">", "<=", ">=", "in", "not in":
		emit = e.use
	default:
		return "", fmt.Errorf("an operator %q", x.op)
	}
	var o operands
	if err := e.addArgs(&o, []expr{x.l, x.r}, nil, emit); err != nil {
		return "", err
	}
	held := holds(o.xs, o.ss, false)
	if x.op == "*" {
		return release("__bh_mul("+o.ss[0]+", "+o.ss[1]+")", held), nil
	}
	return release("("+paren(x.l, o.ss[0])+" "+x.op+" "+paren(x.r, o.ss[1])+")", held), nil
}

func (e *emitter) call(x callExpr) (string, error) {
	s, held, err := e.callHeld(x)
	return release(s, held), err
}

// callHeld writes a call through its guard, and reports whether it holds
// operands that release must free once the call has returned. A
// {% call %} block's callee must stay a call, and is released by the
// next statement's guard instead.
func (e *emitter) callHeld(x callExpr) (string, bool, error) {
	if a, ok := x.fn.(attrExpr); ok && guardedMethods[a.name] {
		// The guard does what the method does, after a check of the
		// size it makes or the time it takes. On a dict it calls what
		// the dict holds, which may be a macro.
		var o operands
		if err := e.add(&o, a.obj, "", nil); err != nil {
			return "", false, err
		}
		if err := e.addArgs(&o, x.args, x.kw, nil); err != nil {
			return "", false, err
		}
		held := holds(o.xs, o.ss, true)
		return "__bh_s" + a.name + "(" + o.join(0) + ")", held, nil
	}
	fn, err := e.expr(x.fn)
	if err != nil {
		return "", false, err
	}
	var o operands
	if err := e.addArgs(&o, x.args, x.kw, nil); err != nil {
		return "", false, err
	}
	held := holds(o.xs, o.ss, true)
	if a, ok := x.fn.(attrExpr); ok && fresh(a.obj) && !allQuiet(o.xs) {
		// A method bound to a fresh value holds it while the arguments
		// are evaluated.
		obj, err := e.expr(a.obj)
		if err != nil {
			return "", false, err
		}
		fn, held = "(__bh_h("+obj+"))."+a.name, true
	}
	rest := o.join(0)
	if rest != "" {
		rest = ", " + rest
	}
	return "__bh_call(" + quote(callableName(x.fn)) + ", " + fn + rest + ")", held, nil
}

func (e *emitter) filter(x filterExpr) (string, error) {
	var o operands
	if !builtinFilters[x.name] {
		if !identRE.MatchString(x.name) || strings.HasPrefix(x.name, guardPrefix) {
			return "", fmt.Errorf("a filter named %q", x.name)
		}
		if err := e.add(&o, x.x, "", nil); err != nil {
			return "", err
		}
		if err := e.addArgs(&o, x.args, x.kw, nil); err != nil {
			return "", err
		}
		held := holds(o.xs, o.ss, true)
		return release("__bh_call("+quote(x.name)+", "+x.name+", "+o.join(0)+")", held), nil
	}
	switch x.name {
	case "indent", "replace", "join", "trim", "from_json", "fromjson", "select", "reject", "selectattr", "rejectattr":
		// The guard does what the filter does, after a check of the size
		// it makes or the time it takes (ops.go, ops_scan.go).
		if err := e.add(&o, x.x, "", nil); err != nil {
			return "", err
		}
		if err := e.addArgs(&o, x.args, x.kw, nil); err != nil {
			return "", err
		}
		held := holds(o.xs, o.ss, false)
		return release("__bh_f"+x.name+"("+o.join(0)+")", held), nil
	case "tojson":
		indent, seps, err := jsonArgs(x.kw)
		if err != nil {
			return "", err
		}
		if err := e.add(&o, x.x, "", nil); err != nil {
			return "", err
		}
		if err := e.addArgs(&o, x.args, x.kw, nil); err != nil {
			return "", err
		}
		held := holds(o.xs, o.ss, false)
		return release(fmt.Sprintf("(__bh_json(%s, %d, %d)|tojson(%s))", o.ss[0], indent, seps, o.join(1)), held), nil
	}
	emit := e.use
	if walks, ok := shallowFilters[x.name]; ok {
		emit = e.expr
		if walks {
			emit = e.walked
		}
	}
	in := emit
	if x.name == "list" {
		in = e.listed // of a string it makes a list of fifty bytes a character
	}
	if err := e.add(&o, x.x, "", in); err != nil {
		return "", err
	}
	if err := e.addArgs(&o, x.args, x.kw, emit); err != nil {
		return "", err
	}
	held := holds(o.xs, o.ss, false)
	s := paren(x.x, o.ss[0]) + "|" + x.name
	if len(x.args) > 0 || len(x.kw) > 0 {
		s += "(" + o.join(1) + ")"
	}
	return release("("+s+")", held), nil
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
