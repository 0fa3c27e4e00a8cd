package chat

import (
	"reflect"
	"strings"
	"testing"
)

// TestRewriteMatchesEngine: the guards (holds, releases, loop and store
// guards, the cost and condition guards, the guards that do trim, strip,
// from_json and select in the engine's stead, and filter blocks written
// as set blocks) change nothing a template renders that stays within its
// limits: output and errors are the bare engine's, byte for byte.
func TestRewriteMatchesEngine(t *testing.T) {
	data := requests()[0]
	for _, src := range []string{
		// Filter blocks, as set blocks: known filters, one that makes a
		// list, an unknown one (an error after the body), and one that
		// is not a name (the body as it is).
		`a{% filter upper %}b{{ 'c' }}{% endfilter %}d`,
		`{% for m in messages %}{% filter escape %}<{{ m.role }}>"{% endfilter %}{% endfor %}`,
		`{% filter tojson %}x"y\{% endfilter %}{% filter indent %}1
2{% endfilter %}{% filter trim %}  z  {% endfilter %}{% filter list %}ab{% endfilter %}`,
		`{% filter replace %}x{% endfilter %}`,
		`{% filter nosuch %}q{% endfilter %}`,
		`{% filter upper(1) %}q{{ 1 }}{% endfilter %}`,
		`{% set x = 1 %}{% filter join %}{% set x = 2 %}{{ x }}{% endfilter %}{{ x }}`,
		// strip and trim, with and without characters; select and
		// reject with and without a test argument; from_json.
		`[{{ '  a b \n'.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a '.lstrip() }}|{{ 'xa'.lstrip('x') }}|{{ ' a '.rstrip() }}|{{ 'ax'.rstrip('x') }}|{{ 'éaé'.strip('é') }}]`,
		`[{{ '  a  '|trim }}|{{ 'xax'|trim('x') }}|{{ 5|trim }}|{{ {'a': 1}.strip }}]`,
		`{% set d = {'strip': raise_exception} %}{{ d.strip('x') }}`,
		`{{ [1, 2].strip() }}`,
		`{{ [1, 0, 2, none]|select|list }}`, // the engine panics: args[2:] of one
		`{{ [1, 0, 2, none]|select('true')|list }}{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('eq', 2)|list }}{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}{{ 'ab'|select('string')|list }}`,
		`{{ messages|rejectattr('content')|list }}`, // the engine panics: args[3:] of two
		`{{ [1, 2]|select('nosuch')|list }}`,
		`{{ '{"a": [1, 2.5, "x", null, true], "b": {"c": "d"}}'|from_json }}{{ 3|from_json }}{{ '[1, 2]'|fromjson|length }}`,
		`{{ '[1'|fromjson }}`,
		// Operands held and released: literals, calls, dicts, tests,
		// slices and methods bound to fresh values.
		`{% macro f(a, b=2) %}[{{ a }}|{{ b }}]{% endmacro %}{{ [f('x' ~ 1, b='y' ~ 2), f(1)|length, {'k' ~ 1: 'v' ~ 2}] }}`,
		`{{ ' a  b\n'.split() }}{{ 'ab'.split('') }}{{ 'a,b'.split(',') }}{{ ''.split(',') }}{% set d = {'split': joiner} %}{{ d.split('-')() }}`,
		`{{ ('a-b' ~ '-c').split('-' ~ '') }}{{ ('ab' ~ 'cd')[1 + 1:] }}{{ ('abc' ~ 'def')[::2 * 1] }}{{ [1, 2, 3][0:2] }}`,
		`{{ ('x' ~ 1) is string }}{{ ('x' ~ 1) in ['x1' ~ ''] }}{{ 'x' ~ 1 == 'x' ~ 1 }}{{ ('1' ~ '2')|int + ('3' ~ '')|int }}`,
		`{{ '3' - 1 }}|{{ '7' % '4' }}|{{ '2' ** 3 }}|{{ '9' // 2 }}|{{ 'x' - 1 }}|{{ 'ab' * 2 }}|{{ '1.5' * 2.0 }}`,
		`{{ messages[0]['content'][0] }}{{ messages[-1].role }}{{ 'héllo'[1] }}{{ 'abc'[5] is defined }}{{ none[0] is defined }}`,
		// Loops: fresh lists, dicts, strings, filters, else, break and
		// continue, nested loops, loop variables, and the set scopes.
		`{% for x in 'ab' ~ 'c' %}{{ loop.index }}{{ x }}{% endfor %}{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}{% for x in [] %}{% else %}empty{% endfor %}`,
		`{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}{% if x == 3 %}{% continue %}{% endif %}{{ x }}{{ loop.cycle('a', 'b') }}{% endfor %}`,
		`{% set a = 1 %}{% for i in range(3) %}{% set a = a ~ i %}{% for j in range(2) %}{% set a = a ~ j %}{{ a }};{% endfor %}{% endfor %}{{ a }}`,
		`{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.s }}`,
		`{% for m in messages %}{% set c = m.content %}{% if loop.first %}{% set c = c|upper %}{% endif %}{{ c[:3] }}{% endfor %}`,
		// Macros defined in macros and loops, call blocks, caller with
		// arguments, joiner and cycler.
		`{% macro outer(x) %}{% macro inner(y) %}{{ x }}{{ y }}{% endmacro %}{{ inner(x ~ '!') }}{% endmacro %}{{ outer('a') }}{% for i in range(2) %}{% macro l() %}{{ i }}{% endmacro %}{{ l() }}{% endfor %}`,
		`{% macro w(t) %}<{{ caller(t ~ '1') }}>{% endmacro %}{% call(v) w('x' ~ 'y') %}[{{ v }}]{% endcall %}{% call w %}z{% endcall %}`,
		`{% set j = joiner(', ') %}{% set c = cycler('a', 'b') %}{% for i in range(3) %}{{ j() }}{{ c.next() }}{% endfor %}`,
		`{% if messages|length > 2 %}a{% elif messages[0].role == 'system' %}b{% else %}c{% endif %}`,
	} {
		g, b, gerr, berr, limited, err := renderBoth(src, data, Limits{})
		switch {
		case err != nil || limited:
			t.Errorf("%s: %v (stopped by a limit: %v)", src, err, limited)
		case (gerr == nil) != (berr == nil):
			t.Errorf("%s: guarded error %v, bare error %v", src, gerr, berr)
		case g != b:
			t.Errorf("%s: guarded\n%q\nbare\n%q", src, g, b)
		case testing.Verbose():
			t.Logf("%.50s: %q %v", src, g, gerr)
		}
	}
}

// TestTreeShape: the reader refuses a node whose fields are not the ones
// of the engine version it was written for, rather than rewrite it
// without a field it does not know (a new engine that gave loops a step,
// say, would render them unguarded).
func TestTreeShape(t *testing.T) {
	type textNode struct{ text, extra string }
	if _, err := (&reader{}).node(reflect.ValueOf(&textNode{})); err == nil || !strings.Contains(err.Error(), "fields") {
		t.Fatalf("a text node with a field more: %v", err)
	}
	type nameExpr struct{}
	if _, err := (&reader{}).expr(reflect.ValueOf(&nameExpr{})); err == nil || !strings.Contains(err.Error(), "fields") {
		t.Fatalf("a name without its field: %v", err)
	}
}

// TestEngineFilters: the select and reject guards call the engine's own
// filters, read from its scope of builtins at start (ops_scan.go); an
// engine that keeps them otherwise would make every select fail.
func TestEngineFilters(t *testing.T) {
	for _, name := range []string{"select", "reject", "selectattr", "rejectattr"} {
		if f, ok := engineFilters[name]; !ok || !f.IsCallable() {
			t.Errorf("the engine's %s filter was not found", name)
		}
	}
}
