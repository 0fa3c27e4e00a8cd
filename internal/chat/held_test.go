package chat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// stoppedUnder is stopped with limits lim: src loads, and its render
// stops with a chat_template_limit error containing want within d.
func stoppedUnder(t *testing.T, lim Limits, src, want string, d time.Duration) {
	t.Helper()
	tmpl, err := New(Options{Source: src, Limits: lim})
	if err != nil {
		t.Errorf("%.80s: refused at load: %v", src, err)
		return
	}
	start := time.Now()
	_, rerr := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
	if rerr == nil || rerr.Kind != errkind.Internal || rerr.Code != "chat_template_limit" || !strings.Contains(rerr.Message, want) {
		t.Errorf("%.80s: got %#v, want a chat_template_limit error saying %q", src, rerr, want)
	}
	if took := time.Since(start); took > d {
		t.Errorf("%.80s: stopped only after %v", src, took)
	}
}

// loops nests n loops of one item each around body.
func loops(n int, body string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{%% for i%d in [1] %%}{%% set a = s ~ i%d %%}", i, i)
	}
	b.WriteString(body)
	b.WriteString(strings.Repeat("{% endfor %}", n))
	return b.String()
}

// TestHeldValuesBounded: values a render holds without storing them count
// against the byte limit (held.go). Before, each of these kept 25 to 100
// times the 4 MB it was allowed (the same with 1 MB strings and default
// limits took the process's memory and killed it), and ended without an
// error: values pending in one list literal or one call; lists with the
// capacity of a wide slice; the lists of loops nested in a recursion;
// functions that capture fresh values (a bound method, a joiner, a macro
// defined in a macro, caller) and are stored; a set that shadows a
// variable of an enclosing scope, which the store guard credited as if it
// replaced it; a chain of |batch(1); a filter block's output; from_json.
func TestHeldValuesBounded(t *testing.T) {
	big := Limits{Steps: 1 << 30, Bytes: 4 << 20, Value: 1 << 20, Depth: 64, Timeout: 10 * time.Second}
	s := `{% set s = 'x' * 100000 %}{% set ns = namespace(l=[]) %}`
	for _, c := range []struct{ name, src, want string }{
		{"values pending in a list literal", s + `{{ [` + strings.Repeat(`s ~ 1, `, 1000) + `1]|length }}`, "keep more than"},
		{"values pending in a call", s + `{% macro f() %}{% endmacro %}{{ f(` + strings.Repeat(`s ~ 1, `, 1000) + `1) }}`, "keep more than"},
		{"values pending in a dict literal", s + `{{ {` + strings.Repeat(`s ~ 1: s ~ 2, `, 500) + `1: 1}|length }}`, "keep more than"},
		{"a wide slice's capacity", `{{ [` + strings.Repeat(`[1, 2, 3][-1000000:1000000:2], `, 10) + `1]|length }}`, "keep more than"},
		{"loops nested in a recursion", `{% macro f(n) %}{% for i in range(65536) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% break %}{% endfor %}{% endmacro %}{{ f(60) }}`, "keep more than"},
		{"a stored bound method", s + `{% for i in range(1000) %}{% set _ = ns.l.append((s ~ i).upper) %}{% endfor %}`, "method str.upper"},
		{"stored joiners", s + `{% for i in range(1000) %}{% set _ = ns.l.append(joiner(s ~ i)) %}{% endfor %}`, "keep more than"},
		{"stored macros defined in a macro", s + `{% macro m(x) %}{% macro inner() %}{% endmacro %}{% set _ = ns.l.append(inner) %}{% endmacro %}{% for i in range(1000) %}{{ m(s ~ i) }}{% endfor %}`, "keep more than"},
		{"stored callers", s + `{% macro keep() %}{% set _ = ns.l.append(caller) %}{% endmacro %}{% for i in range(1000) %}{% for x in [s ~ i] %}{% call keep() %}{% endcall %}{% endfor %}{% endfor %}`, "keep more than"},
		{"sets shadowing an enclosing scope's", `{% set s = 'x' * 1000000 %}{% set a = s ~ 0 %}` + loops(150, ""), "keep more than"},
		{"sets shadowing, in a recursion", s + `{% set a = s ~ 0 %}{% macro f(n) %}{% set a = s ~ n %}` + loops(20, `{% if n > 0 %}{{ f(n - 1) }}{% endif %}`) + `{% endmacro %}{{ f(50) }}`, "keep more than"},
		{"a chain of batch", `{{ (('x' * 50000)|list` + strings.Repeat(`|batch(1)`, 20) + `)|length }}`, "over the"},
		{"a filter block's output", `{% set s = '"' * 100000 %}{% for i in range(30) %}{% filter escape %}{{ s }}{% endfilter %}{% endfor %}`, "keep more than"},
		{"from_json", `{% set j = '[' ~ '0,' * 400000 ~ '0]' %}{{ j|from_json|length }}`, "keep more than"},
		{"split into characters", `{{ ('x' * 1000000).split('')|length }}`, "keep more than"},
		{"a list of characters", `{{ ('x' * 1000000)|list|length }}`, "keep more than"},
	} {
		t.Run(c.name, func(t *testing.T) { stoppedUnder(t, big, c.src, c.want, 5*time.Second) })
	}
}

// TestTimeoutReadsTheClock: the clock is read as often as the template
// works. Before, a loop whose body was a condition on a long string read
// it only when the loop began (its iterations were counted there, and a
// condition had no guard), and indexing or measuring the string (which
// the engine decodes whole) was no step: this one ran for seconds past a
// 100 ms limit, and at 65,536 iterations for minutes.
func TestTimeoutReadsTheClock(t *testing.T) {
	lim := Limits{Steps: 1 << 40, Timeout: 100 * time.Millisecond}
	for _, cond := range []string{`s[5]`, `s|length`, `s|int`, `s - 1`, `s % 2`, `s[1:3]`, `s|list`} {
		src := `{% set s = '1' * 1000000 %}{% for i in range(3000) %}{% if ` + cond + ` %}{% endif %}{% endfor %}`
		stoppedUnder(t, lim, src, "ran for more than", time.Second)
	}
}

// TestOneOperationBounded: an operation that runs without a guard until it
// is done, and whose time is the product of two lengths, is counted before
// it starts and refused if it is too long for the clock to stop. Before,
// each of these ran for about a second with no error; with 1 MB strings,
// for 25 seconds, and a loop of them for hours.
func TestOneOperationBounded(t *testing.T) {
	s := `{% set s = 'é' * 50000 %}{% set c = 'ü' * 50000 ~ 'é' %}`
	for _, src := range []string{
		s + `{{ s|trim(c) }}`,
		s + `{{ s.strip(c) }}`,
		s + `{{ s.lstrip(c) }}`,
		s + `{{ s.rstrip(c) }}`,
		`{% set t = 'x' * 200000 %}{{ ('y' * 20000)|list|select('in', t)|list|length }}`,
		`{% set t = 'x' * 200000 %}{{ ('y' * 20000)|list|reject('in', t)|list|length }}`,
	} {
		stopped(t, src, "one operation would take")
	}
	// str.format is a pass over the string for each argument.
	stoppedUnder(t, Limits{Steps: 50000}, `{% set s = 'x' * 100000 %}{{ s.format(`+strings.Repeat(`1, `, 5000)+`1)|length }}`, "steps", 5*time.Second)
}
