package chat

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// The operations that make a large string out of small ones in a single
// step, done here after a check of the size they will make: string
// repetition, replace (filter and method), str.format, join and indent.
// Each does exactly what the engine (v1.8.0) does, whose helpers are
// unexported and so copied here (printValue, toInt64, toFloat64), except
// where the engine would panic: a negative repetition count or indent
// width gives "" and no indent, as in Python.

// printValue is the text the engine prints for v.
func printValue(v jinja.Value) string {
	switch {
	case v.IsUndefined(), v.IsNone(), v.IsCallable():
		return ""
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsInt():
		return fmt.Sprintf("%d", v.AsInt())
	case v.IsFloat():
		return fmt.Sprintf("%g", v.AsFloat())
	case v.IsString():
		return v.AsString()
	}
	return v.String() // a list or a dict, as Python would print it
}

// toInt64 is the engine's conversion of a value to an integer.
func toInt64(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var n int64
		fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}

// toFloat64 is the engine's conversion of a value to a float.
func toFloat64(v jinja.Value) float64 {
	switch {
	case v.IsFloat():
		return v.AsFloat()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var f float64
		fmt.Sscanf(v.AsString(), "%f", &f)
		return f
	}
	return 0
}

// grown is the length of s after replacing n occurrences of a string of
// length from by one of length to, saturating instead of overflowing.
func grown(s, n, from, to int) int64 {
	return satAdd(int64(s), satMul(int64(n), int64(to-from)))
}

// replaceCount is how many replacements strings.Replace(s, old, _, count)
// makes.
func replaceCount(s, old string, count int) int {
	n := utf8.RuneCountInString(s) + 1 // an empty old matches around every rune
	if old != "" {
		n = strings.Count(s, old)
	}
	if count >= 0 && count < n {
		n = count
	}
	return n
}

// mul is the * operator. A string operand that is not repeated is
// parsed as a number, which reads all of it.
func (st *account) mul(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := st.step(1 + (extent(args[0])+extent(args[1]))>>12); err != nil {
		return jinja.Undefined(), err
	}
	a, b := args[0], args[1]
	if a.IsString() && b.IsInt() {
		n := b.AsInt()
		if n <= 0 || a.AsString() == "" {
			return jinja.NewString(""), nil
		}
		if size := satMul(int64(len(a.AsString())), n); size > st.maxValue {
			return jinja.Undefined(), st.fail("a string of %d bytes repeated %d times makes %d bytes, over the %d one value may hold", len(a.AsString()), n, size, st.maxValue)
		}
		return jinja.NewString(strings.Repeat(a.AsString(), int(n))), nil
	}
	if a.IsFloat() || b.IsFloat() {
		return jinja.NewFloat(toFloat64(a) * toFloat64(b)), nil
	}
	return jinja.NewInt(toInt64(a) * toInt64(b)), nil
}

// replaced does strings.Replace after checking the size it makes.
func (st *account) replaced(s, old, new string, count int) (jinja.Value, error) {
	n := replaceCount(s, old, count)
	if size := grown(len(s), n, len(old), len(new)); size > st.maxValue {
		return jinja.Undefined(), st.fail("replace would make %d bytes, over the %d one value may hold", size, st.maxValue)
	}
	return jinja.NewString(strings.Replace(s, old, new, count)), nil
}

// filterReplace is the replace filter: s|replace(old, new[, count]).
func (st *account) filterReplace(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) < 3 {
		return jinja.NewString(""), fmt.Errorf("replace: expected at least 3 arguments")
	}
	count := -1
	if len(args) > 3 {
		count = int(toInt64(args[3]))
	}
	if c, ok := kw["count"]; ok {
		count = int(toInt64(c))
	}
	return st.replaced(printValue(args[0]), printValue(args[1]), printValue(args[2]), count)
}

// method resolves obj.name(args) where obj is not a string, as the engine
// does: a dict's own key first, which may hold a callable; anything else
// has no such method.
func (st *account) method(obj jinja.Value, name string, args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if obj.IsDict() {
		if f, ok := obj.AsDict().Get(name); ok && f.IsCallable() {
			return st.invoke(name, f, args, kw)
		}
	}
	return jinja.Undefined(), fmt.Errorf("%s is not callable", name)
}

// stringReplace is s.replace(old, new[, count]).
func (st *account) stringReplace(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	obj, args := args[0], args[1:]
	if !obj.IsString() {
		return st.method(obj, "replace", args, kw)
	}
	if len(args) < 2 {
		return obj, nil
	}
	count := -1
	if len(args) > 2 {
		count = int(toInt64(args[2]))
	}
	return st.replaced(obj.AsString(), printValue(args[0]), printValue(args[1]), count)
}

// stringFormat is s.format(args...): the engine replaces "{i}" with the
// i-th argument, then the first "{}" with it, argument by argument.
func (st *account) stringFormat(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	obj, args := args[0], args[1:]
	if !obj.IsString() {
		return st.method(obj, "format", args, kw)
	}
	result := obj.AsString()
	for i, arg := range args {
		// Each argument is a pass over the result: thousands of short
		// arguments to a long string are as costly as one long one.
		if err := st.step(1 + int64(len(result))>>12); err != nil {
			return jinja.Undefined(), err
		}
		ph, a := fmt.Sprintf("{%d}", i), printValue(arg)
		size := grown(len(result), strings.Count(result, ph), len(ph), len(a))
		if strings.Contains(result, "{}") {
			size = satAdd(size, int64(len(a)-2))
		}
		if size > st.maxValue {
			return jinja.Undefined(), st.fail("format would make %d bytes, over the %d one value may hold", size, st.maxValue)
		}
		result = strings.ReplaceAll(result, ph, a)
		result = strings.Replace(result, "{}", a, 1)
	}
	return jinja.NewString(result), nil
}

// filterJoin is the join filter: items|join(sep) writes sep between every
// two items, so a long separator over many items is large.
func (st *account) filterJoin(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if !args[0].IsList() {
		return jinja.NewString(printValue(args[0])), nil
	}
	sep := ""
	if len(args) > 1 {
		sep = printValue(args[1])
	}
	if s, ok := kw["d"]; ok {
		sep = printValue(s)
	}
	attr := ""
	if a, ok := kw["attribute"]; ok {
		attr = printValue(a)
	}
	items := args[0].AsList().Items
	size := satMul(int64(max(len(items)-1, 0)), int64(len(sep)))
	parts := make([]string, len(items))
	for i, item := range items {
		if attr != "" && item.IsDict() {
			if v, ok := item.AsDict().Get(attr); ok {
				item = v
			}
		}
		parts[i] = printValue(item)
		size = satAdd(size, int64(len(parts[i])))
	}
	if size > st.maxValue {
		return jinja.Undefined(), st.fail("join would make %d bytes, over the %d one value may hold", size, st.maxValue)
	}
	return jinja.NewString(strings.Join(parts, sep)), nil
}

// filterIndent is the indent filter: s|indent(width=4, first=false) puts
// width spaces before every non-empty line but the first.
func (st *account) filterIndent(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.uses(args, kw); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	s := printValue(args[0])
	width := int64(4)
	if len(args) > 1 {
		width = toInt64(args[1])
	}
	if w, ok := kw["width"]; ok {
		width = toInt64(w)
	}
	first := len(args) > 2 && args[2].IsTruthy()
	if f, ok := kw["first"]; ok {
		first = f.IsTruthy()
	}
	width = max(width, 0)
	lines := strings.Split(s, "\n")
	padded := 0
	for i, line := range lines {
		if line != "" && (i > 0 || first) {
			padded++
		}
	}
	if padded == 0 {
		return jinja.NewString(s), nil
	}
	if size := satAdd(int64(len(s)), satMul(int64(padded), width)); size > st.maxValue {
		return jinja.Undefined(), st.fail("indent by %d would make %d bytes, over the %d one value may hold", width, size, st.maxValue)
	}
	pad := strings.Repeat(" ", int(width))
	for i, line := range lines {
		if line != "" && (i > 0 || first) {
			lines[i] = pad + line
		}
	}
	return jinja.NewString(strings.Join(lines, "\n")), nil
}

// satAdd and satMul are + and * on non-negative sizes, stopping at
// math.MaxInt64 instead of wrapping.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return max(a*b, 0) // callers pass sizes and counts; a negative product is no growth
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
