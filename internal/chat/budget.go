package chat

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Limits bound one render of a chat template, so that a template that
// loops, recurses or grows strings without end (by mistake, or a model
// file made to take the server down) fails its request with an error
// instead of taking the server's CPU, memory or stack. Real templates stay
// far below them; the byte limits grow with the conversation, so that a
// long one renders as before. A zero field takes its DefaultLimits value.
type Limits struct {
	// Steps bounds the guarded operations and loop iterations; an
	// operation that reads a long string counts a step per 4 KiB, and one
	// that runs unguarded until it is done may take at most a 32nd of
	// them.
	Steps int64
	// Bytes bounds what a render keeps and holds: the text it writes, the
	// memory its variables, namespaces and lists come to hold, and the
	// values pending in the expressions and loops it is evaluating. Each
	// byte of the conversation adds 16.
	Bytes int64
	// Value bounds one value, a string or a list or dict as printed, and
	// so what any one operation may build. Each byte of the conversation
	// adds 2: a template may hold all of it in one string.
	Value int64
	// Depth bounds nested calls (macros, caller(), a template's own
	// filters): recursion without end would otherwise overflow the stack,
	// which kills the process.
	Depth int
	// Timeout bounds the time Render takes for a request, both of its
	// renders together.
	Timeout time.Duration
}

// DefaultLimits are the limits of a Template whose Options set none. The
// time limit is the bound on CPU; the step limit stops a runaway loop
// sooner, and is set well above real use: a 2,000-message conversation
// through the costliest template tested (Mistral Medium 3.5's, quadratic
// in the messages) takes 12 million steps and 2 seconds, and keeps 5 MB.
var DefaultLimits = Limits{Steps: 1 << 27, Bytes: 64 << 20, Value: 1 << 20, Depth: 64, Timeout: 10 * time.Second}

// orDefaults fills l's zero fields from DefaultLimits.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits
	if l.Steps > 0 {
		d.Steps = l.Steps
	}
	if l.Bytes > 0 {
		d.Bytes = l.Bytes
	}
	if l.Value > 0 {
		d.Value = l.Value
	}
	if l.Depth > 0 {
		d.Depth = l.Depth
	}
	if l.Timeout > 0 {
		d.Timeout = l.Timeout
	}
	return d
}

// maxValueDepth bounds how deeply lists and dicts nest in a value that is
// printed, compared or stored: the engine walks them by recursion.
const maxValueDepth = 128

// limitError is a render stopped by a limit.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// account is the account of one render: the guards' shared state. A
// Template makes one per render, so renders never share it.
type account struct {
	lim      Limits
	budget   int64 // bytes the render may keep
	maxValue int64 // bytes one value may print as
	steps    int64
	ticks    int64 // steps and small guarded operations (work)
	bytes    int64
	clock    int64 // ticks when the clock was last read
	depth    int
	held     int64   // bytes pending in the expressions and loops being evaluated (held.go)
	frames   []frame // the engine's scopes, innermost last (held.go)
	deadline time.Time
	err      *limitError // the first limit reached; every guard fails with it after
}

// now is the clock renders are timed by; a test replaces it.
var now = time.Now

// newAccount starts the account of one render that must end by deadline.
func newAccount(lim Limits, input int, deadline time.Time) *account {
	return &account{lim: lim, budget: satAdd(lim.Bytes, satMul(16, int64(input))),
		maxValue: satAdd(lim.Value, satMul(2, int64(input))), deadline: deadline,
		frames: []frame{{}}}
}

// fail records the first limit reached and returns it.
func (st *account) fail(format string, args ...any) error {
	if st.err == nil {
		st.err = &limitError{msg: fmt.Sprintf(format, args...)}
	}
	return st.err
}

// step counts n steps, and every few hundred reads the clock.
func (st *account) step(n int64) error { return st.work(n, n) }

// work counts steps, and ticks, the units of work between two reads of
// the clock. A guard that stands for a small operation (the cost guard on
// a short operand, a condition) is a tick but not a step: it is there to
// read the clock, not to count the template's operations, which would
// otherwise come to several times as many for the same template.
func (st *account) work(steps, ticks int64) error {
	if st.err != nil {
		return st.err
	}
	st.steps = satAdd(st.steps, steps)
	if st.steps > st.lim.Steps {
		return st.fail("it took more than %d steps", st.lim.Steps)
	}
	st.ticks = satAdd(st.ticks, ticks)
	if st.ticks-st.clock >= 256 {
		st.clock = st.ticks
		if now().After(st.deadline) {
			return st.fail("it ran for more than %v", st.lim.Timeout)
		}
	}
	return nil
}

// charge counts n bytes kept; what the render holds counts too.
func (st *account) charge(n int64) error {
	st.bytes = satAdd(st.bytes, max(n, 0))
	if satAdd(st.bytes, st.held) > st.budget {
		return st.fail("it would keep more than %d bytes", st.budget)
	}
	return nil
}

// weight is what a value comes to when walked: flat is its printed length
// (at least: a string counts its quotes; in JSON, its escapes), mem the
// memory it holds (at least: a string its bytes, and every value
// nodeMem), nodes the values in it, depthSum the sum of their depths below
// it, maxDepth the deepest.
type weight struct{ flat, mem, nodes, depthSum, maxDepth int64 }

// nodeMem is what one value costs beyond its string bytes: a jinja.Value
// (a kind and an interface) in a slice, and the boxed string or the list
// or dict header behind it.
const nodeMem = 48

// weigher walks one value. A list or dict met twice (shared) is walked
// once but counted each time, as printing it would; one met inside itself
// is a cycle, which printing would follow until the stack overflows. With
// json set, strings count as JSON writes them. With retain set, the value
// is one the render holds or keeps, and a bound method in it is an error:
// what it holds cannot be weighed.
type weigher struct {
	json    bool
	retain  bool
	memo    map[any]weight
	onPath  map[any]bool
	visited int64
}

// jsonLen is at least the length of s as a JSON string: the engine escapes
// quotes and backslashes, control characters, HTML's <, > and &, and the
// line separators as \uXXXX, and writes invalid UTF-8 as \ufffd.
func jsonLen(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError && size == 1:
			n += 6
		default:
			n += int64(size)
		}
		i += size
	}
	return n
}

func (w *weigher) of(v jinja.Value, depth int) (weight, error) {
	var key any
	switch {
	case v.IsString():
		s := v.AsString()
		flat := int64(len(s)) + 2
		if w.json {
			flat = jsonLen(s)
		}
		return weight{flat: flat, mem: int64(len(s)) + nodeMem, nodes: 1}, nil
	case v.IsCallable():
		name := v.AsCallable().Name
		if w.retain && boundMethod(name) {
			return weight{}, fmt.Errorf("a value holding the method %s, whose memory this server cannot count", name)
		}
		return weight{flat: int64(len(name)) + 12, mem: nodeMem, nodes: 1}, nil
	case v.IsList():
		key = v.AsList()
	case v.IsDict():
		key = v.AsDict()
	default:
		return weight{flat: 24, mem: nodeMem, nodes: 1}, nil
	}
	if m, ok := w.memo[key]; ok {
		if int64(depth)+m.maxDepth > maxValueDepth {
			return m, fmt.Errorf("lists or dicts nested more than %d deep", maxValueDepth)
		}
		return m, nil
	}
	if w.onPath[key] {
		return weight{}, fmt.Errorf("a list or dict that contains itself")
	}
	if depth >= maxValueDepth {
		return weight{}, fmt.Errorf("lists or dicts nested more than %d deep", maxValueDepth)
	}
	if w.memo == nil {
		w.memo, w.onPath = map[any]weight{}, map[any]bool{}
	}
	w.onPath[key] = true
	defer delete(w.onPath, key)
	acc := weight{flat: 2, mem: nodeMem, nodes: 1}
	if v.IsList() { // the backing array's unused capacity
		l := v.AsList()
		acc.mem = satAdd(acc.mem, satMul(int64(cap(l.Items)-len(l.Items)), valueSize))
	}
	add := func(item jinja.Value, key string, isKey bool) error {
		w.visited++
		c, err := w.of(item, depth+1)
		if err != nil {
			return err
		}
		flat, mem := c.flat+2, c.mem
		if isKey {
			k := int64(len(key)) + 2
			if w.json {
				k = jsonLen(key)
			}
			flat, mem = satAdd(flat, k+2), satAdd(mem, int64(len(key))+nodeMem)
		}
		acc.flat = satAdd(acc.flat, flat)
		acc.mem = satAdd(acc.mem, mem)
		acc.nodes = satAdd(acc.nodes, c.nodes)
		acc.depthSum = satAdd(acc.depthSum, satAdd(c.depthSum, c.nodes))
		acc.maxDepth = max(acc.maxDepth, c.maxDepth+1)
		return nil
	}
	if v.IsList() {
		for _, item := range v.AsList().Items {
			if err := add(item, "", false); err != nil {
				return weight{}, err
			}
		}
	} else {
		d := v.AsDict()
		for _, k := range d.Keys {
			if err := add(d.Data[k], k, true); err != nil {
				return weight{}, err
			}
		}
	}
	w.memo[key] = acc
	return acc, nil
}

// weigh walks v, counting the walk as steps.
func (st *account) weigh(v jinja.Value, json bool) (weight, error) {
	w := weigher{json: json}
	m, err := w.of(v, 0)
	if serr := st.step(w.visited); serr != nil {
		return m, serr
	}
	if err != nil {
		return m, st.fail("the template built %s", err)
	}
	return m, nil
}

// check is the use guard: v, about to be printed, compared or combined,
// may print as at most maxValue bytes, and must be walkable. It is a step,
// and reading a long string a step per 4 KiB more, so that the clock is
// read as often on long strings as on many short ones.
func (st *account) check(v jinja.Value) (weight, error) {
	if err := st.step(1 + extent(v)>>12); err != nil {
		return weight{}, err
	}
	var w weight
	switch {
	case v.IsString():
		n := int64(len(v.AsString()))
		w = weight{flat: n, mem: n + nodeMem, nodes: 1}
	case v.IsList(), v.IsDict():
		var err error
		if w, err = st.weigh(v, false); err != nil {
			return w, err
		}
	default:
		return weight{flat: 24, mem: nodeMem, nodes: 1}, nil
	}
	if w.flat > st.maxValue {
		return w, st.fail("it built a value of %d bytes, over the %d one value may hold", w.flat, st.maxValue)
	}
	return w, nil
}

// uses checks every argument.
func (st *account) uses(args []jinja.Value, kw map[string]jinja.Value) error {
	for _, a := range args {
		if _, err := st.check(a); err != nil {
			return err
		}
	}
	for _, a := range kw {
		if _, err := st.check(a); err != nil {
			return err
		}
	}
	return nil
}

// invoke is a call of f, which the engine would have made itself: it
// counts the call's depth, and what an append, insert or update adds to a
// list or dict that outlives it, and what a joiner or cycler keeps of its
// arguments. The call runs in a frame of its own (held.go): what it holds
// is released when it returns.
func (st *account) invoke(name string, f jinja.Value, args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if err := st.step(1); err != nil {
		return jinja.Undefined(), err
	}
	if !f.IsCallable() {
		return jinja.Undefined(), fmt.Errorf("%s is not callable", name)
	}
	c := f.AsCallable()
	var kept []jinja.Value
	switch {
	case c.Name == "list.append" && len(args) > 0:
		kept = args[:1]
	case c.Name == "list.insert" && len(args) > 1:
		kept = args[1:2]
	case c.Name == "dict.update" && len(args) > 0 && args[0].IsDict():
		kept = args[:1]
	case c.Name == "joiner" || c.Name == "cycler":
		kept = args // held by the function returned, for as long as it is kept
	}
	for _, k := range kept {
		w, err := st.keep(k)
		if err == nil {
			err = st.charge(w.mem)
		}
		if err != nil {
			return jinja.Undefined(), err
		}
	}
	st.depth++
	n := len(st.frames)
	st.push(st.held, st.held)
	defer func() { st.depth--; st.pop(n) }()
	if st.depth > st.lim.Depth {
		return jinja.Undefined(), st.fail("calls nested more than %d deep (a macro that calls itself without end?)", st.lim.Depth)
	}
	return c.Fn(args, kw)
}

// guards are the callables the instrumented template calls, by name.
func (st *account) guards() map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	one := func(g func(jinja.Value) error) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		return func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if err := g(args[0]); err != nil {
				return jinja.Undefined(), err
			}
			return args[0], nil
		}
	}
	return map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error){
		// An operand about to be printed, compared or combined.
		"__bh_a": one(func(v jinja.Value) error { _, err := st.check(v); return err }),
		// Output: what the template writes is kept until the end.
		"__bh_out": one(func(v jinja.Value) error {
			w, err := st.check(v)
			if err == nil {
				err = st.charge(w.flat)
			}
			st.settle()
			return err
		}),
		// A slice bound: the engine walks from start to stop one index
		// at a time, however far past the end they lie.
		"__bh_ix": one(func(v jinja.Value) error {
			if n := toInt64(v); n > 1<<20 || n < -(1<<20) {
				return st.fail("a slice bound of %d is out of range", n)
			}
			return st.step(1)
		}),
		// Loops, stores, holds and costs: held.go.
		"__bh_iter":   st.loop,
		"__bh_endfor": st.endLoop,
		"__bh_vset":   st.setVar,
		"__bh_set":    st.setAttr,
		"__bh_cap":    st.capture,
		"__bh_h":      one(st.hold),
		"__bh_m":      st.mark,
		"__bh_r":      st.release,
		"__bh_o":      one(st.cost),
		"__bh_ol":     one(st.listCost),
		"__bh_if":     one(st.condition),
		"__bh_call": func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
			if err := st.uses(args[2:], kw); err != nil {
				return jinja.Undefined(), err
			}
			return st.invoke(args[0].AsString(), args[1], args[2:], kw)
		},
		// tojson: its output grows with the value as JSON escapes it,
		// the indent at each level and the separators at each item.
		"__bh_json": func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if err := st.step(1); err != nil {
				return jinja.Undefined(), err
			}
			w, err := st.weigh(args[0], true)
			if err != nil {
				return jinja.Undefined(), err
			}
			indent, seps := args[1].AsInt(), args[2].AsInt()
			size := satAdd(satAdd(w.flat, satMul(w.nodes, 26+seps)), satMul(indent+1, satAdd(w.depthSum, w.nodes)))
			if size > st.maxValue {
				return jinja.Undefined(), st.fail("tojson would make up to %d bytes, over the %d one value may hold", size, st.maxValue)
			}
			return args[0], nil
		},
		"__bh_mul":         st.mul,
		"__bh_freplace":    st.filterReplace,
		"__bh_fjoin":       st.filterJoin,
		"__bh_findent":     st.filterIndent,
		"__bh_sreplace":    st.stringReplace,
		"__bh_sformat":     st.stringFormat,
		"__bh_sstrip":      st.stringTrim("strip"),
		"__bh_slstrip":     st.stringTrim("lstrip"),
		"__bh_srstrip":     st.stringTrim("rstrip"),
		"__bh_ssplit":      st.stringSplit,
		"__bh_ftrim":       st.filterTrim,
		"__bh_ffrom_json":  st.filterFromJSON,
		"__bh_ffromjson":   st.filterFromJSON,
		"__bh_fselect":     st.filterEach("select"),
		"__bh_freject":     st.filterEach("reject"),
		"__bh_fselectattr": st.filterEach("selectattr"),
		"__bh_frejectattr": st.filterEach("rejectattr"),
	}
}
