package chat

import (
	"strings"
	"testing"
)

// TestRecursiveMacrosRefused: a template whose macros can reach
// themselves would overflow the stack at the first chat request and kill
// the process; New refuses it with the cycle named. Without the check,
// this test dies of a fatal stack overflow rather than failing.
func TestRecursiveMacrosRefused(t *testing.T) {
	for _, c := range []struct{ src, cycle string }{
		{`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`, "f -> f"},
		{`{%- macro a() -%}{{ b() }}{%- endmacro -%}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, "a -> b -> a"},
		{`{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ f() }}`, "f -> f"},
		{`{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`, "f -> f"},
	} {
		_, err := New(Options{Source: c.src})
		if err == nil || !strings.Contains(err.Error(), c.cycle) {
			t.Errorf("%s: got %v, want a refusal naming %q", c.src, err, c.cycle)
		}
	}
	// Macros that call each other without a cycle are fine, and render.
	tmpl, err := New(Options{Source: `{% macro wrap(s) %}[{{ s }}]{% endmacro %}{% macro both(a, b) %}{{ wrap(a) }}{{ wrap(b) }}{% endmacro %}{% for m in messages %}{{ both(m.role, m.content) }}{% endfor %}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := Text(render(t, tmpl, []Message{{Role: "user", Content: "hi"}}, false)); got != "[user][hi]" {
		t.Fatalf("got %q", got)
	}
}

// TestRecursionBounded: a macro can reach itself in ways no reading of
// the source sees: passed to itself as an argument, through a call block,
// or stored in a namespace. checkRecursion lets these through, and before
// the call guard each crashed the test binary with a stack overflow; the
// guard stops it at Limits.Depth with an error for that request.
func TestRecursionBounded(t *testing.T) {
	for _, src := range []string{
		`{% macro m(f) %}{{ f(f) }}{% endmacro %}{{ m(m) }}`,
		`{% macro m(f) %}{% call f(f) %}{% endcall %}{% endmacro %}{{ m(m) }}`,
		`{% macro m(x, f) %}{{ x|f(f) }}{% endmacro %}{{ 1|m(m) }}`,
		`{% set ns = namespace() %}{% macro f() %}{{ ns.g() }}{% endmacro %}{% set ns.g = f %}{{ f() }}`,
	} {
		stopped(t, src, "calls nested more than")
	}
}

// TestRangeBounded: range() keeps Jinja's meaning up to maxRangeItems
// items and refuses more, instead of building a list until memory runs
// out.
func TestRangeBounded(t *testing.T) {
	for src, want := range map[string]string{
		`{% for i in range(3) %}{{ i }}{% endfor %}`:                                               "012",
		`{% for i in range(2, 5) %}{{ i }}{% endfor %}`:                                            "234",
		`{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}`:                                        "531",
		`{% for i in range(3, 1) %}{{ i }}{% endfor %}x`:                                           "x",
		`{{ range(65536)|length }}`:                                                                "65536",
		`{% for i in range(0, 9223372036854775807, 4611686018427387904) %}{{ i > 0 }}{% endfor %}`: "FalseTrue",
	} {
		tmpl, err := New(Options{Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if got := Text(render(t, tmpl, nil, false)); got != want {
			t.Errorf("%s: got %q, want %q", src, got, want)
		}
	}
	for _, src := range []string{`{{ range(65537)|length }}`, `{% for i in range(1000000000000) %}{% endfor %}`, `{{ range(0, 1, 0) }}`} {
		tmpl, err := New(Options{Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if _, rerr := tmpl.Render(nil, false); rerr == nil {
			t.Errorf("%s rendered", src)
		}
	}
}
