package chat

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The syntax tree of a compiled template, read out of the Jinja engine.
//
// The engine keeps its tree unexported and has no hooks: nothing in it
// counts steps, bounds a string or limits depth. To bound a render, New
// rewrites the template with guard calls (instrument.go); to rewrite it
// exactly as the engine understood it, it reads the engine's own tree
// rather than parsing the source a second time with a parser that could
// disagree. The reading is by reflection on the pinned version's types
// (github.com/ardanlabs/jinja v1.8.0), read-only, and fails closed: a node
// or field it does not know is an error, so a new engine version that
// changes the tree makes New refuse every template (TestRealTemplates
// fails) rather than render one unguarded.

// Statement nodes.
type (
	textNode   struct{ text string }
	outputNode struct{ x expr }
	ifNode     struct {
		conds  []expr // nil for the else branch
		bodies [][]node
	}
	forNode struct {
		key, val     string
		iter, filter expr
		body, els    []node
		recursive    bool
	}
	setNode struct {
		ns, target string
		value      expr
	}
	setBlockNode struct {
		target string
		body   []node
	}
	macroNode struct {
		name   string
		params []param
		body   []node
	}
	param struct {
		name string
		def  expr // nil: no default
	}
	callBlockNode struct {
		args []string
		call expr
		body []node
	}
	filterBlockNode struct {
		filter expr
		body   []node
	}
	breakNode    struct{}
	continueNode struct{}
)

// Expression nodes.
type (
	litExpr  struct{ v jinja.Value }
	nameExpr struct{ name string }
	attrExpr struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct{ obj, start, stop, step expr }
	unaryExpr struct {
		op string
		x  expr
	}
	binExpr struct {
		op   string
		l, r expr
	}
	condExpr struct{ t, c, f expr } // f nil: no else
	callExpr struct {
		fn   expr
		args []expr
		kw   []kwarg
	}
	filterExpr struct {
		x    expr
		name string
		args []expr
		kw   []kwarg
	}
	testExpr struct {
		x    expr
		name string
		neg  bool
		args []expr
	}
	listExpr struct{ items []expr }
	dictExpr struct{ keys, vals []expr }
	kwarg    struct {
		name string
		v    expr
	}
)

type (
	node any
	expr any
)

// engineFields are the fields of each struct of the engine's tree, in the
// version this reader was written for. A struct with other fields is
// refused (shape): a field this reader does not know is one the rewrite
// would drop, and what it means would be rendered without its guard.
var engineFields = map[string]string{
	"textNode": "text", "outputNode": "expression", "ifNode": "branches", "condBranch": "condition body",
	"forNode": "keyVar valVar iter body elseBody filterExpr recursive",
	"setNode": "target namespace value", "setBlockNode": "target body", "macroNode": "name params body",
	"macroParam": "name defaultVal", "callNode": "callerArgs expr body", "filterBlockNode": "filter body",
	"breakNode": "", "continueNode": "", "litExpr": "val", "Value": "kind v", "nameExpr": "name",
	"attrExpr": "obj attr", "itemExpr": "obj key", "sliceExpr": "obj start stop step", "unaryExpr": "op operand",
	"binExpr": "op left right", "condExpr": "trueExpr condition falseExpr", "callExpr": "fn args kwargs",
	"kwarg": "name value", "filterExpr": "expr name args kwargs", "testExpr": "expr name negated args",
	"listExpr": "items", "dictExpr": "pairs", "dictPair": "key value",
}

// shape checks that s, a struct of the engine's tree, has exactly the
// fields engineFields gives its type.
func shape(s reflect.Value) error {
	name := s.Type().Name()
	want, ok := engineFields[name]
	if !ok {
		return fmt.Errorf("the template engine has a node %s this server does not know", name)
	}
	var got []string
	for i := range s.NumField() {
		got = append(got, s.Type().Field(i).Name)
	}
	if strings.Join(got, " ") != want {
		return fmt.Errorf("the template engine's %s has the fields %v, not the %q this server knows", name, got, want)
	}
	return nil
}

// maxNesting bounds how deep statements and expressions nest. The engine
// evaluates by recursion, a few stack frames a level, on every render and
// in every concurrent request; real templates nest a few dozen levels.
const maxNesting = 200

// reader converts the engine's tree. depth is the current nesting.
type reader struct{ depth int }

// readTree returns the tree of t. Reflection panics on a field that is
// missing or of another kind; that is recovered as an error, as the tree
// then has a shape this server does not know.
func readTree(t *jinja.Template) (ns []node, err error) {
	defer func() {
		if p := recover(); p != nil {
			ns, err = nil, fmt.Errorf("the template engine's syntax tree has a shape this server does not know (%v)", p)
		}
	}()
	v := reflect.ValueOf(t).Elem().FieldByName("nodes")
	if !v.IsValid() || v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("the template engine keeps no node list this server knows")
	}
	return (&reader{}).nodes(v)
}

func (r *reader) nodes(v reflect.Value) ([]node, error) {
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("a node list is a %s", v.Kind())
	}
	out := make([]node, 0, v.Len())
	for i := range v.Len() {
		n, err := r.node(v.Index(i))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// field returns v's field name, or an invalid Value (then str, list and
// the like fail) when v has none: the tree's shape has changed.
func field(v reflect.Value, name string) reflect.Value { return v.FieldByName(name) }

func str(v reflect.Value, name string) (string, error) {
	f := field(v, name)
	if f.Kind() != reflect.String {
		return "", fmt.Errorf("%s.%s is not a string", v.Type().Name(), name)
	}
	return f.String(), nil
}

// elem follows an interface and a pointer to the struct behind them; ok
// is false for a nil.
func elem(v reflect.Value) (s reflect.Value, ok bool) {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, v.Kind() == reflect.Struct
}

func (r *reader) enter() error {
	r.depth++
	if r.depth > maxNesting {
		return fmt.Errorf("statements or expressions nest more than %d deep", maxNesting)
	}
	return nil
}

// begin resolves v to the struct a node or expression (what) points to,
// counts one level of nesting and checks the struct's shape. On success
// the caller must undo the nesting (defer r.depth--); on an error it is
// already undone.
func (r *reader) begin(v reflect.Value, what string) (reflect.Value, error) {
	s, ok := elem(v)
	if !ok {
		return s, fmt.Errorf("a nil %s", what)
	}
	if err := r.enter(); err != nil {
		r.depth--
		return s, err
	}
	if err := shape(s); err != nil {
		r.depth--
		return s, err
	}
	return s, nil
}

func (r *reader) node(v reflect.Value) (node, error) {
	s, err := r.begin(v, "node")
	if err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	var n node
	switch s.Type().Name() {
	case "textNode":
		var t textNode
		t.text, err = str(s, "text")
		n = t
	case "outputNode":
		var o outputNode
		o.x, err = r.expr(field(s, "expression"))
		n = o
	case "ifNode":
		var in ifNode
		br := field(s, "branches")
		for i := 0; err == nil && i < br.Len(); i++ {
			b := br.Index(i)
			if err = shape(b); err != nil {
				break
			}
			var c expr
			var body []node
			if c, err = r.optExpr(field(b, "condition")); err == nil {
				body, err = r.nodes(field(b, "body"))
			}
			in.conds, in.bodies = append(in.conds, c), append(in.bodies, body)
		}
		n = in
	case "forNode":
		var f forNode
		f.recursive = field(s, "recursive").Bool()
		err = firstErr(
			func() (e error) { f.key, e = str(s, "keyVar"); return },
			func() (e error) { f.val, e = str(s, "valVar"); return },
			func() (e error) { f.iter, e = r.expr(field(s, "iter")); return },
			func() (e error) { f.filter, e = r.optExpr(field(s, "filterExpr")); return },
			func() (e error) { f.body, e = r.nodes(field(s, "body")); return },
			func() (e error) { f.els, e = r.optNodes(field(s, "elseBody")); return })
		n = f
	case "setNode":
		var st setNode
		err = firstErr(
			func() (e error) { st.ns, e = str(s, "namespace"); return },
			func() (e error) { st.target, e = str(s, "target"); return },
			func() (e error) { st.value, e = r.expr(field(s, "value")); return })
		n = st
	case "setBlockNode":
		var sb setBlockNode
		err = firstErr(
			func() (e error) { sb.target, e = str(s, "target"); return },
			func() (e error) { sb.body, e = r.nodes(field(s, "body")); return })
		n = sb
	case "macroNode":
		var m macroNode
		m.name, err = str(s, "name")
		ps := field(s, "params")
		for i := 0; err == nil && i < ps.Len(); i++ {
			if err = shape(ps.Index(i)); err != nil {
				break
			}
			var p param
			if p.name, err = str(ps.Index(i), "name"); err == nil {
				p.def, err = r.optExpr(field(ps.Index(i), "defaultVal"))
			}
			m.params = append(m.params, p)
		}
		if err == nil {
			m.body, err = r.nodes(field(s, "body"))
		}
		n = m
	case "callNode":
		var c callBlockNode
		as := field(s, "callerArgs")
		for i := 0; i < as.Len(); i++ {
			c.args = append(c.args, as.Index(i).String())
		}
		err = firstErr(
			func() (e error) { c.call, e = r.expr(field(s, "expr")); return },
			func() (e error) { c.body, e = r.nodes(field(s, "body")); return })
		n = c
	case "filterBlockNode":
		var fb filterBlockNode
		err = firstErr(
			func() (e error) { fb.filter, e = r.expr(field(s, "filter")); return },
			func() (e error) { fb.body, e = r.nodes(field(s, "body")); return })
		n = fb
	case "breakNode":
		n = breakNode{}
	case "continueNode":
		n = continueNode{}
	default:
		return nil, fmt.Errorf("the template engine has a statement %s this server does not know", s.Type().Name())
	}
	return n, err
}

func (r *reader) optNodes(v reflect.Value) ([]node, error) {
	if v.Kind() == reflect.Slice && v.IsNil() {
		return nil, nil
	}
	return r.nodes(v)
}

func (r *reader) optExpr(v reflect.Value) (expr, error) {
	if _, ok := elem(v); !ok && v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		return nil, nil
	}
	return r.expr(v)
}

func (r *reader) exprs(v reflect.Value) ([]expr, error) {
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("an expression list is a %s", v.Kind())
	}
	out := make([]expr, 0, v.Len())
	for i := range v.Len() {
		e, err := r.expr(v.Index(i))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (r *reader) kwargs(v reflect.Value) ([]kwarg, error) {
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("a keyword list is a %s", v.Kind())
	}
	var out []kwarg
	for i := range v.Len() {
		if err := shape(v.Index(i)); err != nil {
			return nil, err
		}
		name, err := str(v.Index(i), "name")
		if err != nil {
			return nil, err
		}
		x, err := r.expr(field(v.Index(i), "value"))
		if err != nil {
			return nil, err
		}
		out = append(out, kwarg{name, x})
	}
	return out, nil
}

func (r *reader) expr(v reflect.Value) (expr, error) {
	s, err := r.begin(v, "expression")
	if err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	var x expr
	switch s.Type().Name() {
	case "litExpr":
		var l litExpr
		l.v, err = literal(field(s, "val"))
		x = l
	case "nameExpr":
		var n nameExpr
		n.name, err = str(s, "name")
		x = n
	case "attrExpr":
		var a attrExpr
		err = firstErr(
			func() (e error) { a.obj, e = r.expr(field(s, "obj")); return },
			func() (e error) { a.name, e = str(s, "attr"); return })
		x = a
	case "itemExpr":
		var it itemExpr
		err = firstErr(
			func() (e error) { it.obj, e = r.expr(field(s, "obj")); return },
			func() (e error) { it.key, e = r.expr(field(s, "key")); return })
		x = it
	case "sliceExpr":
		var sl sliceExpr
		err = firstErr(
			func() (e error) { sl.obj, e = r.expr(field(s, "obj")); return },
			func() (e error) { sl.start, e = r.optExpr(field(s, "start")); return },
			func() (e error) { sl.stop, e = r.optExpr(field(s, "stop")); return },
			func() (e error) { sl.step, e = r.optExpr(field(s, "step")); return })
		x = sl
	case "unaryExpr":
		var u unaryExpr
		err = firstErr(
			func() (e error) { u.op, e = str(s, "op"); return },
			func() (e error) { u.x, e = r.expr(field(s, "operand")); return })
		x = u
	case "binExpr":
		var b binExpr
		err = firstErr(
			func() (e error) { b.op, e = str(s, "op"); return },
			func() (e error) { b.l, e = r.expr(field(s, "left")); return },
			func() (e error) { b.r, e = r.expr(field(s, "right")); return })
		x = b
	case "condExpr":
		var c condExpr
		err = firstErr(
			func() (e error) { c.t, e = r.expr(field(s, "trueExpr")); return },
			func() (e error) { c.c, e = r.expr(field(s, "condition")); return },
			func() (e error) { c.f, e = r.optExpr(field(s, "falseExpr")); return })
		x = c
	case "callExpr":
		var c callExpr
		err = firstErr(
			func() (e error) { c.fn, e = r.expr(field(s, "fn")); return },
			func() (e error) { c.args, e = r.exprs(field(s, "args")); return },
			func() (e error) { c.kw, e = r.kwargs(field(s, "kwargs")); return })
		x = c
	case "filterExpr":
		var f filterExpr
		err = firstErr(
			func() (e error) { f.x, e = r.expr(field(s, "expr")); return },
			func() (e error) { f.name, e = str(s, "name"); return },
			func() (e error) { f.args, e = r.exprs(field(s, "args")); return },
			func() (e error) { f.kw, e = r.kwargs(field(s, "kwargs")); return })
		x = f
	case "testExpr":
		var t testExpr
		t.neg = field(s, "negated").Bool()
		err = firstErr(
			func() (e error) { t.x, e = r.expr(field(s, "expr")); return },
			func() (e error) { t.name, e = str(s, "name"); return },
			func() (e error) { t.args, e = r.exprs(field(s, "args")); return })
		x = t
	case "listExpr":
		var l listExpr
		l.items, err = r.exprs(field(s, "items"))
		x = l
	case "dictExpr":
		var d dictExpr
		ps := field(s, "pairs")
		for i := 0; err == nil && i < ps.Len(); i++ {
			if err = shape(ps.Index(i)); err != nil {
				break
			}
			var k, val expr
			if k, err = r.expr(field(ps.Index(i), "key")); err == nil {
				val, err = r.expr(field(ps.Index(i), "value"))
			}
			d.keys, d.vals = append(d.keys, k), append(d.vals, val)
		}
		x = d
	default:
		return nil, fmt.Errorf("the template engine has an expression %s this server does not know", s.Type().Name())
	}
	return x, err
}

// literal reads a jinja.Value out of the tree: its kind and the Go value
// behind it (bool, int64, float64 or string; nothing for none).
func literal(v reflect.Value) (jinja.Value, error) {
	if v.Kind() != reflect.Struct {
		return jinja.Value{}, fmt.Errorf("a literal of a shape this server does not know")
	}
	if err := shape(v); err != nil {
		return jinja.Value{}, err
	}
	kind, val := field(v, "kind"), field(v, "v")
	if kind.Kind() != reflect.Int || val.Kind() != reflect.Interface {
		return jinja.Value{}, fmt.Errorf("a literal of a shape this server does not know")
	}
	if val.IsNil() {
		switch jinja.Kind(kind.Int()) {
		case jinja.KindNone:
			return jinja.None(), nil
		case jinja.KindUndefined:
			return jinja.Undefined(), nil
		}
		return jinja.Value{}, fmt.Errorf("a literal of kind %d without a value", kind.Int())
	}
	g := val.Elem()
	switch jinja.Kind(kind.Int()) {
	case jinja.KindBool:
		if g.Kind() == reflect.Bool {
			return jinja.NewBool(g.Bool()), nil
		}
	case jinja.KindInt:
		if g.Kind() == reflect.Int64 {
			return jinja.NewInt(g.Int()), nil
		}
	case jinja.KindFloat:
		if g.Kind() == reflect.Float64 {
			return jinja.NewFloat(g.Float()), nil
		}
	case jinja.KindString:
		if g.Kind() == reflect.String {
			return jinja.NewString(g.String()), nil
		}
	}
	return jinja.Value{}, fmt.Errorf("a literal of kind %d holding a %s", kind.Int(), g.Kind())
}

// firstErr runs fs in order and returns the first error.
func firstErr(fs ...func() error) error {
	for _, f := range fs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}
