package chat

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// What a render holds without keeping it. The byte limit counts what a
// render keeps (its output and its variables), but a render also holds
// values it has not stored: the operands an operation has evaluated while
// it evaluates the next (every item of a list literal, every argument of
// a call), the list a loop runs over, and the values a function captures.
// Each is bounded by Limits.Value, but not their number: a list literal
// of thousands of 'x' * 1000000 ~ i holds gigabytes before any guard sees
// the list, and so do loops nested in a recursion, or functions that
// capture a fresh argument and are stored.
//
// So the account also keeps held: the memory of the values pending in the
// expressions and loops being evaluated now, which counts against the
// byte limit with what the render keeps. The rewrite (instrument_hold.go)
// holds a fresh operand while a later one is evaluated, every fresh
// argument of a call (which may run the template's own code), and marks
// and releases them around the operation that consumes them; a loop holds
// its list until it ends. Each statement settles held back to its frame's
// base, so that nothing an error left behind outlives the statement.
//
// Frames mirror the engine's scopes (the render's, a loop's, a call's),
// for two things: held at their start, to return to at their end, and
// the bytes charged for each plain variable set in them. A {% set %}
// writes to the innermost scope, so a value it replaces is freed only if
// it was set in that same scope: one set in an enclosing scope stays
// there, and crediting it (as the store guard once did) let nested loops
// and recursion keep a fresh value per level for nothing.

// frame is one of the engine's scopes, as the account sees it.
type frame struct {
	restore  int64            // held to return to when the frame ends
	base     int64            // held between the frame's statements
	vars     map[string]int64 // bytes charged for each plain variable set in it
	captured bool             // a function made in it has been charged for what it holds
}

// valueSize is the size of one jinja.Value in a list's backing array: a
// list keeps its capacity, which a slice with a wide step makes up to a
// million items for a list of three.
var valueSize = int64(reflect.TypeOf(jinja.Value{}).Size())

// boundMethod reports whether name is that of a method the engine binds
// to a string, list or dict. Such a function holds its receiver, which
// weighing the function cannot see: a render may call one, but not keep
// one (see weigher.retain).
func boundMethod(name string) bool {
	return strings.HasPrefix(name, "str.") || strings.HasPrefix(name, "list.") || strings.HasPrefix(name, "dict.")
}

// top is the innermost frame.
func (st *account) top() *frame { return &st.frames[len(st.frames)-1] }

// push starts a frame whose statements run with held at base; held
// returns to restore when it ends.
func (st *account) push(restore, base int64) {
	st.frames = append(st.frames, frame{restore: restore, base: base})
}

// pop ends frames down to n, returning held to what it was when frame n
// began.
func (st *account) pop(n int) {
	if n < 1 || n >= len(st.frames) {
		return
	}
	st.held = st.frames[n].restore
	st.frames = st.frames[:n]
}

// settle ends a statement: what its expression held is no longer pending.
func (st *account) settle() { st.held = st.top().base }

// holdBytes adds n bytes to held, and checks held and kept against the
// byte limit.
func (st *account) holdBytes(n int64) error {
	st.held = satAdd(st.held, max(n, 0))
	if satAdd(st.bytes, st.held) > st.budget {
		return st.fail("it would keep more than %d bytes", st.budget)
	}
	return nil
}

// hold is the hold guard: v is pending while other operands are
// evaluated.
func (st *account) hold(v jinja.Value) error {
	if err := st.step(1); err != nil {
		return err
	}
	w, err := st.weighKept(v, false)
	if err != nil {
		return err
	}
	return st.holdBytes(w.mem)
}

// weighKept weighs v as a value the render holds or keeps: a bound
// method in it is refused (see boundMethod). The walk is a step per
// value, or with ticksOnly only a tick (work).
func (st *account) weighKept(v jinja.Value, ticksOnly bool) (weight, error) {
	if !v.IsList() && !v.IsDict() && !v.IsCallable() {
		n := int64(0)
		if v.IsString() {
			n = int64(len(v.AsString()))
		}
		return weight{flat: n, mem: n + nodeMem, nodes: 1}, nil
	}
	w := weigher{retain: true}
	m, err := w.of(v, 0)
	steps := w.visited
	if ticksOnly {
		steps = 0
	}
	if serr := st.work(steps, w.visited); serr != nil {
		return m, serr
	}
	if err != nil {
		return m, st.fail("the template built %s", err)
	}
	return m, nil
}

// loop is the loop guard, __bh_iter(v, fresh, filtered): v is the list,
// dict or string a loop runs over. Each item is a step. The loop holds,
// until it ends (__bh_endfor), v itself when v is a fresh value, the list
// of items the engine makes of a dict or string, and the list its filter
// makes.
func (st *account) loop(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	v := args[0]
	n := 0
	switch {
	case v.IsList():
		n = v.AsList().Len()
	case v.IsDict():
		n = v.AsDict().Len()
	case v.IsString():
		n = utf8.RuneCountInString(v.AsString())
	}
	if err := st.step(int64(n) + 1); err != nil {
		return jinja.Undefined(), err
	}
	st.settle()
	restore := st.held
	var cost int64
	if len(args) > 1 && args[1].IsTruthy() {
		// Its items are counted as steps already.
		w, err := st.weighKept(v, true)
		if err != nil {
			return jinja.Undefined(), err
		}
		cost = w.mem
	}
	if v.IsDict() || v.IsString() {
		cost = satAdd(cost, satMul(int64(n), nodeMem))
	}
	if len(args) > 2 && args[2].IsTruthy() {
		cost = satAdd(cost, satMul(int64(n), valueSize))
	}
	if err := st.holdBytes(cost); err != nil {
		return jinja.Undefined(), err
	}
	st.push(restore, st.held)
	return v, nil
}

// endLoop is __bh_endfor, written after every {% endfor %}: the loop's
// list is no longer held.
func (st *account) endLoop(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	st.pop(len(st.frames) - 1)
	return jinja.Undefined(), nil
}

// capture is __bh_cap, written before every {% macro %} and {% call %}:
// the function the engine makes there holds the scope it is made in, and
// through it whatever the render holds now (the arguments of the calls it
// is in, the lists of the loops it is in), for as long as the function is
// kept. So that is charged as kept, once for each scope: the functions
// made in one scope (a macro defined in a loop, at each iteration) hold
// the same values.
func (st *account) capture(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if err := st.step(1); err != nil {
		return jinja.Undefined(), err
	}
	if f := st.top(); !f.captured {
		f.captured = true
		return jinja.Undefined(), st.charge(st.held)
	}
	return jinja.Undefined(), nil
}

// setVar is __bh_vset(name, v), the store guard of {% set name = v %}:
// v is kept, less what the variable held if it was set in the same scope.
func (st *account) setVar(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	name, v := args[0].AsString(), args[1]
	w, err := st.keep(v)
	if err != nil {
		return jinja.Undefined(), err
	}
	f := st.top()
	if err := st.charge(w.mem - f.vars[name]); err != nil {
		return jinja.Undefined(), err
	}
	if f.vars == nil {
		f.vars = map[string]int64{}
	}
	f.vars[name] = w.mem
	st.settle()
	return v, nil
}

// setAttr is __bh_set(old, v), the store guard of {% set ns.name = v %}:
// v is kept, less old, the value it replaces in the namespace.
func (st *account) setAttr(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	w, err := st.keep(args[1])
	if err != nil {
		return jinja.Undefined(), err
	}
	var ow weigher // no credit for an old value that cannot be walked
	old, _ := ow.of(args[0], 0)
	if err := st.charge(w.mem - old.mem); err != nil {
		return jinja.Undefined(), err
	}
	st.settle()
	return args[1], nil
}

// keep checks v, about to be stored, as the use guard does, and weighs it
// as kept, in one walk.
func (st *account) keep(v jinja.Value) (weight, error) {
	if err := st.step(1 + extent(v)>>12); err != nil {
		return weight{}, err
	}
	w, err := st.weighKept(v, false)
	if err == nil && w.flat > st.maxValue {
		err = st.fail("it built a value of %d bytes, over the %d one value may hold", w.flat, st.maxValue)
	}
	return w, err
}

// cost is the cost guard, __bh_o(v): an operation the engine does without
// a guard walks v once (indexing or slicing a string decodes all of it,
// |length counts its characters, - and % parse it as a number), and a
// condition is a statement's step. Without it a loop whose body only
// tests a condition on a long string ran for minutes between two reads of
// the clock.
func (st *account) cost(v jinja.Value) error {
	n := extent(v) >> 12
	return st.work(n, 1+n)
}

// listCost is the cost guard of |list: of a string the engine makes a
// list of one-character strings, some fifty bytes for each byte of it,
// which must fit in what the render may still keep.
func (st *account) listCost(v jinja.Value) error {
	if err := st.cost(v); err != nil {
		return err
	}
	if v.IsString() {
		return st.room(satMul(int64(utf8.RuneCountInString(v.AsString())), nodeMem))
	}
	return nil
}

// room checks that an operation may make a value of n bytes: the render
// keeps or holds what it makes, and the check comes before it is made.
func (st *account) room(n int64) error {
	if satAdd(satAdd(st.bytes, st.held), n) > st.budget {
		return st.fail("it would keep more than %d bytes", st.budget)
	}
	return nil
}

// extent is the length of v's top level: bytes, items or keys.
func extent(v jinja.Value) int64 {
	switch {
	case v.IsString():
		return int64(len(v.AsString()))
	case v.IsList():
		return int64(v.AsList().Len())
	case v.IsDict():
		return int64(v.AsDict().Len())
	}
	return 0
}

// condition is __bh_if(v), around the condition of an {% if %}, an
// {% elif %} or a loop's filter: the one statement with no other guard.
func (st *account) condition(v jinja.Value) error {
	if err := st.cost(v); err != nil {
		return err
	}
	st.settle()
	return nil
}

// mark and release are __bh_m() and __bh_r(mark, v): the operation whose
// operands were held has made v, so they are no longer pending.
func (st *account) mark(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	return jinja.NewInt(st.held), nil
}

func (st *account) release(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 || !args[0].IsInt() {
		return jinja.Undefined(), fmt.Errorf("internal error: release without a mark")
	}
	st.held = max(args[0].AsInt(), st.top().base)
	return args[1], nil
}
