package chat

import (
	"fmt"
	"regexp"
	"strings"
)

// instrument writes the template back out as Jinja source with a guard
// (budget.go) around every operation that can grow a value, loop, call or
// write output, so that the engine, which has no limits of its own, calls
// back into this package at each of them. The rewritten template renders
// exactly what the original does until a limit is reached:
//   - text becomes an output of a string literal, and every statement is
//     written without whitespace around it, so the engine's whitespace
//     control (trim markers, trim_blocks, lstrip_blocks), already applied
//     to the tree, has nothing left to act on;
//   - expressions are written fully parenthesised, so they parse to the
//     same tree, with guards as extra calls around operands;
//   - a guard returns its operand unchanged, or, for the few operations it
//     replaces (string repetition, replace, format, join, indent), the
//     engine's own result, computed the same way after a size check.
//
// Names beginning with guardPrefix are the guards'; a template that uses
// one is refused, so that it can neither shadow a guard nor call one.

// guardPrefix starts the name of every guard.
const guardPrefix = "__bh_"

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// emitter writes the instrumented template.
type emitter struct {
	b strings.Builder
	// inFilter is set inside a {% filter %} block's body, where output
	// reaches the filter without passing an output guard: a filter block
	// nested in another would apply each filter to the other's output,
	// and tojson doubles every backslash, so that k nested blocks
	// multiply the text by 2^k. Nested filter blocks are refused; a macro,
	// set or call body starts afresh, as its output is guarded where it
	// is printed.
	inFilter bool
}

// instrument returns the source of the guarded template for tree ns.
func instrument(ns []node) (string, error) {
	var e emitter
	if err := e.nodes(ns); err != nil {
		return "", err
	}
	return e.b.String(), nil
}

func (e *emitter) nodes(ns []node) error {
	for _, n := range ns {
		if err := e.node(n); err != nil {
			return err
		}
	}
	return nil
}

// fresh runs f for a body whose output is captured and guarded where it
// is printed (a macro, set block or caller).
func (e *emitter) fresh(body []node) error {
	saved := e.inFilter
	e.inFilter = false
	err := e.nodes(body)
	e.inFilter = saved
	return err
}

func (e *emitter) tag(parts ...string) {
	e.b.WriteString("{% ")
	for _, p := range parts {
		e.b.WriteString(p)
	}
	e.b.WriteString(" %}")
}

func (e *emitter) node(n node) error {
	switch n := n.(type) {
	case textNode:
		if n.text != "" {
			e.b.WriteString("{{ __bh_out(" + quote(n.text) + ") }}")
		}
	case outputNode:
		x, err := e.expr(n.x)
		if err != nil {
			return err
		}
		e.b.WriteString("{{ __bh_out(" + x + ") }}")
	case ifNode:
		for i, c := range n.conds {
			switch {
			case c == nil:
				e.tag("else")
			default:
				x, err := e.expr(c)
				if err != nil {
					return err
				}
				e.tag(map[bool]string{true: "if ", false: "elif "}[i == 0], x)
			}
			if err := e.nodes(n.bodies[i]); err != nil {
				return err
			}
		}
		e.tag("endif")
	case forNode:
		if err := names("a loop variable", append(optional(n.key), n.val)...); err != nil {
			return err
		}
		vars := n.val
		if n.key != "" {
			vars = n.key + ", " + n.val
		}
		iter, err := e.expr(n.iter)
		if err != nil {
			return err
		}
		head := "for " + vars + " in __bh_iter(" + iter + ")"
		if n.filter != nil {
			f, err := e.expr(n.filter)
			if err != nil {
				return err
			}
			head += " if " + paren(n.filter, f)
		}
		if n.recursive {
			head += " recursive"
		}
		e.tag(head)
		if err := e.nodes(n.body); err != nil {
			return err
		}
		if n.els != nil {
			e.tag("else")
			if err := e.nodes(n.els); err != nil {
				return err
			}
		}
		e.tag("endfor")
	case setNode:
		if err := names("a set target", append(optional(n.ns), n.target)...); err != nil {
			return err
		}
		x, err := e.expr(n.value)
		if err != nil {
			return err
		}
		target := n.target
		if n.ns != "" {
			target = n.ns + "." + n.target
		}
		// The value it replaces goes to the store guard too, for its
		// account.
		e.tag("set ", target, " = __bh_set(", target, ", ", x, ")")
	case setBlockNode:
		if err := names("a set target", n.target); err != nil {
			return err
		}
		e.tag("set ", n.target)
		if err := e.fresh(n.body); err != nil {
			return err
		}
		e.tag("endset")
	case macroNode:
		if err := names("a macro name", n.name); err != nil {
			return err
		}
		var ps []string
		for _, p := range n.params {
			if err := names("a macro parameter", p.name); err != nil {
				return err
			}
			if p.def == nil {
				ps = append(ps, p.name)
				continue
			}
			d, err := plain(p.def)
			if err != nil || strings.Contains(d, ",") {
				return fmt.Errorf("macro %s: the default of %s is not a constant this server can keep as written", n.name, p.name)
			}
			ps = append(ps, p.name+"="+d)
		}
		e.tag("macro ", n.name, "(", strings.Join(ps, ", "), ")")
		if err := e.fresh(n.body); err != nil {
			return err
		}
		e.tag("endmacro")
	case callBlockNode:
		// The engine calls the block's callee itself, with caller among
		// the keyword arguments; written as a call of the call guard, it
		// is the guard that the engine calls, and that calls the callee.
		c, ok := n.call.(callExpr)
		if !ok {
			c = callExpr{fn: n.call}
		}
		x, err := e.call(c)
		if err != nil {
			return err
		}
		if err := names("a caller parameter", n.args...); err != nil {
			return err
		}
		head := "call "
		if len(n.args) > 0 {
			head = "call(" + strings.Join(n.args, ", ") + ") "
		}
		e.tag(head, x)
		if err := e.fresh(n.body); err != nil {
			return err
		}
		e.tag("endcall")
	case filterBlockNode:
		if e.inFilter {
			return fmt.Errorf("a {%% filter %%} block inside another: each would filter the other's output unchecked")
		}
		// The engine applies only a filter named alone; anything else it
		// never evaluates and writes the body as is.
		f := "none"
		if name, ok := n.filter.(nameExpr); ok {
			f = name.name
		}
		e.tag("filter ", f)
		e.inFilter = true
		err := e.nodes(n.body)
		e.inFilter = false
		if err != nil {
			return err
		}
		e.tag("endfilter")
	case breakNode:
		e.tag("break")
	case continueNode:
		e.tag("continue")
	default:
		return fmt.Errorf("a statement of type %T", n)
	}
	return nil
}

// names checks that each s is a plain name, as every real template's
// are. The engine takes statements apart by splitting text, and so takes
// anything there ({% set 'x' = 1 %}, {% set = 1 %}, {% for a b in c %}),
// which could not be written back the same way.
func names(what string, ss ...string) error {
	for _, s := range ss {
		if !identRE.MatchString(s) {
			return fmt.Errorf("%s %q is not a name", what, s)
		}
		if strings.HasPrefix(s, guardPrefix) {
			return fmt.Errorf("the name %s is reserved", s)
		}
	}
	return nil
}

// optional is the names to check of a name a statement may leave out.
func optional(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
