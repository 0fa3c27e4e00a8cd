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
//     replaces (string repetition, replace, format, join, indent, trim,
//     strip, from_json, select and reject), the engine's own result,
//     computed the same way after a check of its size or its time;
//   - operands pending while others are evaluated are held and released
//     (instrument_hold.go), a loop is followed by {{ __bh_endfor() }},
//     a macro or call block is preceded by {{ __bh_cap() }} (these write
//     nothing), and a filter block with a known filter is written as a set
//     block and an output of what the filter makes of it.
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
				// The condition guard reads the clock: a loop whose body
				// only tests conditions has no other guard.
				e.tag(map[bool]string{true: "if ", false: "elif "}[i == 0], "__bh_if(", x, ")")
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
		// The loop guard holds the list until __bh_endfor, after the
		// loop, releases it.
		head := "for " + vars + " in __bh_iter(" + iter + ", " + flag(fresh(n.iter)) + ", " + flag(n.filter != nil) + ")"
		if n.filter != nil {
			f, err := e.expr(n.filter)
			if err != nil {
				return err
			}
			head += " if __bh_if(" + f + ")"
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
		e.b.WriteString("{{ __bh_endfor() }}")
	case setNode:
		if err := names("a set target", append(optional(n.ns), n.target)...); err != nil {
			return err
		}
		x, err := e.expr(n.value)
		if err != nil {
			return err
		}
		if n.ns == "" {
			// The guard credits the value it replaces only if it was
			// set in the same scope (held.go).
			e.tag("set ", n.target, " = __bh_vset(", quote(n.target), ", ", x, ")")
			break
		}
		// The value it replaces in the namespace goes to the store guard
		// too, for its account.
		target := n.ns + "." + n.target
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
		// The macro holds the scope it is defined in (held.go).
		e.b.WriteString("{{ __bh_cap() }}")
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
		x, _, err := e.callHeld(c)
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
		// caller holds the scope of the call (held.go).
		e.b.WriteString("{{ __bh_cap() }}")
		e.tag(head, x)
		if err := e.fresh(n.body); err != nil {
			return err
		}
		e.tag("endcall")
	case filterBlockNode:
		if e.inFilter {
			return fmt.Errorf("a {%% filter %%} block inside another: each would filter the other's output unchecked")
		}
		// The engine applies only a filter named alone, looked up among
		// its own; anything else it never evaluates and writes the body
		// as is, and an unknown name is an error after the body.
		name, named := n.filter.(nameExpr)
		f := "none"
		if named {
			f = name.name
		}
		// The engine writes what a filter makes of the body without a
		// guard: |escape makes six bytes of one, so a loop of such blocks
		// wrote many times what the byte limit allows. A known filter is
		// written as a set block and an output instead, which the output
		// guard checks; the body goes to a name of the guards' own, in
		// the same scope, as the engine's filter block does.
		known := named && builtinFilters[f]
		if known {
			e.tag("set __bh_fb")
		} else {
			e.tag("filter ", f)
		}
		e.inFilter = true
		err := e.nodes(n.body)
		e.inFilter = false
		if err != nil {
			return err
		}
		if !known {
			e.tag("endfilter")
			break
		}
		e.tag("endset")
		x, err := e.filter(filterExpr{x: rawExpr{"__bh_fb"}, name: f})
		if err != nil {
			return err
		}
		e.b.WriteString("{{ __bh_out(" + x + ") }}")
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
