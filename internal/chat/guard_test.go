package chat

import (
	"testing"
)

// TestRecursiveMacros: a template whose macros call themselves loads.
// Recursion with a base case (as real templates use it, for nested tool
// schemas) renders; recursion without one is stopped at Limits.Depth with
// an error for that request, where before the guard it overflowed the
// stack and killed the process.
func TestRecursiveMacros(t *testing.T) {
	for _, src := range []string{
		`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`,
		`{%- macro a() -%}{{ b() }}{%- endmacro -%}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`,
		`{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ f() }}`,
		`{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`,
	} {
		stopped(t, src, "calls nested more than")
	}
	tmpl, err := New(Options{Source: `{% macro schema(v, d) %}{% if v is mapping %}{{ '{' }}{% for k, x in v|items %}{{ k }}:{{ schema(x, d + 1) }};{% endfor %}{{ '}' }}{% else %}{{ v }}@{{ d }}{% endif %}{% endmacro %}{{ schema({"a": {"b": 1}, "c": 2}, 0) }}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := Text(render(t, tmpl, nil, false)); got != "{a:{b:1@2;};c:2@1;}" {
		t.Fatalf("bounded recursion rendered %q", got)
	}
}

// TestRecursionBounded: a macro can reach itself in ways no reading of
// the source sees: passed to itself as an argument, through a call block,
// or stored in a namespace. Before the call guard each crashed the test
// binary with a stack overflow; the guard stops it at Limits.Depth with an
// error for that request.
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
