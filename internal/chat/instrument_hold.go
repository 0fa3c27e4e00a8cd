package chat

// What the rewrite holds (see held.go): an operand is held while the
// operation it belongs to evaluates a later operand, if evaluating it may
// have made a value of any size (it is fresh) and evaluating the later one
// may make more (it is not quiet). Operands that are names, literals or
// parts of them are the values they name, which are accounted where they
// were made; a number or a bool (numeric) is small. Of these, real templates hold
// almost nothing, and the few operations that hold are marked and released
// (__bh_m, __bh_r) so that a chain of them holds each value once.

// quiet reports whether evaluating x makes no value of its own: a literal,
// a name, or an attribute or item of a quiet expression (an item of a
// string is one character; the engine's guard-free raw names are quiet).
func quiet(x expr) bool {
	switch x := x.(type) {
	case litExpr, nameExpr, rawExpr:
		return true
	case attrExpr:
		return quiet(x.obj)
	case itemExpr:
		return quiet(x.obj) && quiet(x.key)
	}
	return false
}

// numeric reports whether x's value is a number or a bool, however it was
// computed.
func numeric(x expr) bool {
	switch x := x.(type) {
	case testExpr:
		return true
	case unaryExpr:
		return x.op != "+" || numeric(x.x) // unary + returns its operand
	case binExpr:
		switch x.op {
		case "==", "!=", "<", ">", "<=", ">=", "in", "not in", "-", "/", "//", "%", "**":
			return true
		}
	}
	return false
}

// fresh reports whether x may evaluate to a new value of any size.
func fresh(x expr) bool { return !quiet(x) && !numeric(x) }

// holds wraps in the hold guard each of ss, the emitted operands xs of
// one operation in the order the engine evaluates them, that is fresh and
// pending while a later one that is not quiet is evaluated; with all, each
// one that is fresh, as the operation itself may run the template's own
// code (a macro) while they are pending. It reports whether it held any:
// the operation must then be wrapped by release.
func holds(xs []expr, ss []string, all bool) bool {
	held := false
	for i, x := range xs {
		if !fresh(x) {
			continue
		}
		if all || !allQuiet(xs[i+1:]) {
			ss[i] = "__bh_h(" + ss[i] + ")"
			held = true
		}
	}
	return held
}

// release wraps s, an operation whose operands were held, so that they
// are released when it has made its value: the mark is evaluated first.
func release(s string, held bool) string {
	if !held {
		return s
	}
	return "__bh_r(__bh_m(), " + s + ")"
}

// costly wraps s, the emitted operand x of an operation that the engine
// does without a guard and that walks its operand once, in the cost guard;
// a literal's cost is bounded by the source.
func costly(x expr, s string) string {
	if _, ok := x.(litExpr); ok {
		return paren(x, s)
	}
	return "__bh_o(" + s + ")"
}

// flag writes a bool as a literal the guards read as one.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// allQuiet reports whether every one of xs is quiet.
func allQuiet(xs []expr) bool {
	for _, x := range xs {
		if !quiet(x) {
			return false
		}
	}
	return true
}
