package chat

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// small are limits low enough that every bomb below stops in
// milliseconds; real templates stay far below even these.
var small = Limits{Steps: 1 << 20, Bytes: 4 << 20, Value: 1 << 20, Depth: 32, Timeout: 10 * time.Second}

// stopped checks that src loads and that its render stops with an
// Internal chat_template_limit error containing want, promptly.
func stopped(t *testing.T, src, want string) {
	t.Helper()
	tmpl, err := New(Options{Source: src, Limits: small})
	if err != nil {
		t.Errorf("%s: refused at load: %v", src, err)
		return
	}
	start := time.Now()
	_, rerr := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
	if rerr == nil || rerr.Kind != errkind.Internal || rerr.Code != "chat_template_limit" || !strings.Contains(rerr.Message, want) {
		t.Errorf("%s: got %#v, want a chat_template_limit error saying %q", src, rerr, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%s: stopped only after %v", src, d)
	}
}

// TestBombsStopped: every way we know for a template to take the whole
// server's memory, CPU or stack with one render ends that render with an
// error instead. Without the guards each of these kills the test binary
// (an allocation of terabytes, a stack overflow, a cycle printed for
// ever) or runs for hours.
func TestBombsStopped(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"string repetition", `{{ 'x' * 1000000000000 }}`, "repeated 1000000000000 times"},
		{"repetition by a computed count", `{{ 'x' * (10 ** 12)|int }}`, "repeated"},
		{"repetition of a repetition", `{{ 'x' * 1000 * 1000 * 1000 }}`, "repeated"},
		{"nested loops over range", `{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}`, "steps"},
		// The engine makes a list of 65,536 values for each range, and of
		// a million one-character strings for the string: the loops hold
		// them (held.go).
		{"nested loops over long ranges", `{% for i in range(65536) %}{% for j in range(65536) %}{% for k in range(65536) %}{% endfor %}{% endfor %}{% endfor %}`, "keep more than"},
		{"a loop over a long string", `{% for c in 'x' * 1000000 %}{% for d in 'y' * 1000000 %}{% endfor %}{% endfor %}`, "keep more than"},
		{"concatenation doubling in a loop", `{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}`, "over the"},
		{"+ doubling in a loop", `{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, "over the"},
		{"a list doubling in a loop", `{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "over the"},
		{"a list that shares itself doubling", `{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`, "over the"},
		{"a list holding itself, printed", `{% set l = [] %}{% set _ = l.append(l) %}{{ l }}`, "contains itself"},
		{"a namespace holding itself, printed", `{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}`, "contains itself"},
		{"a list holding itself, as JSON", `{% set l = [] %}{% set _ = l.append(l) %}{{ l|tojson }}`, "contains itself"},
		{"a list holding itself, compared", `{% set l = [] %}{% set _ = l.append(l) %}{{ l == l }}`, "contains itself"},
		{"lists nested a million deep", `{% set ns = namespace(l=[]) %}{% for i in range(65536) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}`, "nested more than"},
		{"indent by a huge width", `{{ 'a\nb'|indent(1000000000000) }}`, "indent by"},
		{"indent by a keyword width", `{{ 'a\nb\nc'|indent(width=(10 ** 12)|int, first=true) }}`, "indent by"},
		{"replace with itself, twice", `{% set s = 'x' * 1000 %}{{ s.replace('x', s).replace('x', s) }}`, "replace would make"},
		{"replace around every character", `{% set s = 'x' * 100000 %}{{ s|replace('', s) }}`, "replace would make"},
		{"format with a repeated placeholder", `{% set s = 'x' * 100000 %}{{ ('{0}' * 1000).format(s) }}`, "format would make"},
		{"join with a long separator", `{{ range(1000)|join('x' * 100000) }}`, "join would make"},
		{"tojson of a shared value", `{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "over the"},
		{"output in a loop", `{% for i in range(65536) %}{{ 'x' * 1000 }}{% endfor %}`, "keep more than"},
		{"text in a loop", `{% for i in range(65536) %}` + strings.Repeat("text ", 200) + `{% endfor %}`, "keep more than"},
		{"appending in a loop", `{% set l = [] %}{% for i in range(65536) %}{% set _ = l.append('x' * 1000) %}{% endfor %}`, "keep more than"},
		{"a slice walking a huge range", `{{ ('é' * 10)[0:1000000000000] }}`, "slice bound"},
		{"a stepped slice of a huge range", `{{ [1, 2, 3][0:10000000000:2] }}`, "slice bound"},
		{"str.format by a number of arguments", `{{ '{0}{0}{0}{0}{0}{0}{0}{0}'.format('{1}{1}{1}{1}{1}{1}{1}{1}', '{2}{2}{2}{2}{2}{2}{2}{2}', '{3}{3}{3}{3}{3}{3}{3}{3}', '{4}{4}{4}{4}{4}{4}{4}{4}', '{5}{5}{5}{5}{5}{5}{5}{5}', '{6}{6}{6}{6}{6}{6}{6}{6}', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') }}`, "format would make"},
	} {
		t.Run(c.name, func(t *testing.T) { stopped(t, c.src, c.want) })
	}
}

// TestTimeout: a render that stays within every count but runs too long
// stops at Limits.Timeout.
func TestTimeout(t *testing.T) {
	tmpl, err := New(Options{Source: `{% for i in range(65536) %}{% for j in range(65536) %}{% endfor %}{% endfor %}`,
		Limits: Limits{Steps: 1 << 62, Timeout: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, rerr := tmpl.Render(nil, false)
	if rerr == nil || !strings.Contains(rerr.Message, "ran for more than 50ms") || time.Since(start) > 5*time.Second {
		t.Fatalf("%#v after %v", rerr, time.Since(start))
	}
}

// TestTimeoutCoversBothRenders: Render renders twice, and Limits.Timeout
// bounds the two together. On a clock that moves 1 ms a reading, a
// template whose one render takes two thirds of the limit is stopped in
// the second; when each render had a deadline of its own, both passed and
// a request could take twice the limit.
func TestTimeoutCoversBothRenders(t *testing.T) {
	src := `{% for i in range(20000) %}{{ messages[0].content }}{% endfor %}`
	msgs := []Message{{Role: "user", Content: "hi"}}
	var reads int
	base := time.Now()
	defer func(old func() time.Time) { now = old }(now)
	now = func() time.Time {
		reads++
		return base.Add(time.Duration(reads) * time.Millisecond)
	}
	render := func(timeout time.Duration) *errkind.Error {
		tmpl, err := New(Options{Source: src, Limits: Limits{Steps: 1 << 40, Timeout: timeout}})
		if err != nil {
			t.Fatal(err)
		}
		reads = 0
		_, rerr := tmpl.Render(msgs, false)
		return rerr
	}
	if err := render(time.Hour); err != nil {
		t.Fatal(err)
	}
	perRender := time.Duration(reads/2) * time.Millisecond
	if perRender < 20*time.Millisecond {
		t.Fatalf("a render read the clock %d times; too few to time", reads)
	}
	limit := perRender * 3 / 2
	if err := render(limit); err == nil || !strings.Contains(err.Message, "ran for more than") {
		t.Fatalf("two renders of %v each under a limit of %v: got %v, want the time limit", perRender, limit, err)
	}
	if took := time.Duration(reads) * time.Millisecond; took > limit+5*time.Millisecond {
		t.Fatalf("Render took %v on the clock under a limit of %v", took, limit)
	}
}

// TestRefusedAtLoad: what New cannot bound, it refuses, naming the
// construct, so that the server does not start with the model rather than
// fail later.
func TestRefusedAtLoad(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`[` + strings.Repeat(`0,`, 200000) + `0]`, "more than the 262144"},
		{`{{ ` + strings.Repeat("[", 300) + "1" + strings.Repeat("]", 300) + ` }}`, "nest more than"},
		{`{{ x|tojson(indent=1000000) }}`, "indent 1000000 is over 64"},
		{`{{ x|tojson(indent=n) }}`, "indent is not a number"},
		{`{{ x|tojson(separators=(a, b)) }}`, "separators are not"},
		{`{% filter upper %}{% filter tojson %}x{% endfilter %}{% endfilter %}`, "block inside another"},
		{`{% set __bh_out = 1 %}`, "reserved"},
		{`{% macro m(x=f(1)) %}{% endmacro %}`, "default of x"},
	} {
		_, err := New(Options{Source: c.src})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "chat template: ") {
			t.Errorf("%.60s: got %v, want a refusal saying %q", c.src, err, c.want)
		}
	}
}

// TestGuardsKeepMeaning: where the engine would panic (a negative
// repetition count or indent width), the guards give Python's answer;
// elsewhere they give the engine's.
func TestGuardsKeepMeaning(t *testing.T) {
	for src, want := range map[string]string{
		`{{ 'ab' * 3 }}|{{ 'ab' * 0 }}|{{ 'ab' * -1 }}|{{ 3 * 'ab' }}|{{ 2.5 * 2 }}|{{ '3' * 2 }}`:        "ababab|||0|5|33",
		`{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\nb'|indent(-3) }}`:                   "a\n    b\n\n    c|  a\n  b|a\nb",
		`{{ 'a-b-c'.replace('-', '+') }}|{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'abc'|replace('', '.') }}`: "a+b+c|a+b-c|.a.b.c.",
		`{{ '{0} and {1}, {}'.format('x', 'y') }}|{{ [1, 'a', none]|join('-') }}|{{ 'abc'|join(',') }}`:   "x and y, x|1-a-|abc",
		`{{ messages|map(attribute='role')|join(', ') }}|{{ {'a': [1, 2]}|tojson(indent=2) }}`:            "user, assistant|{\n  \"a\": [\n    1,\n    2\n  ]\n}",
		`{{ 'héllo'[1:3] }}{{ [1, 2, 3][::-1] }}{{ 'abc'[-1] }}`:                                          "él[3, 2, 1]c",
		`{% set d = {'replace': raise_exception} %}{{ 'x'.format() }}`:                                    "x",
	} {
		tmpl, err := New(Options{Source: src})
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		got, rerr := tmpl.Render([]Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}}, false)
		if rerr != nil || Text(got) != want {
			t.Errorf("%s: got %q %v, want %q", src, Text(got), rerr, want)
		}
	}
}
