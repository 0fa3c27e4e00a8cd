package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzTemplate: a chat template comes from a model file, which the
// operator may not have written; compiling and rendering any template,
// with any message content, returns a template or an error, never panics,
// and ends within its limits: templates that loop, recurse or grow without
// end are in, as the guards must stop them. The seeds are the real
// templates in testdata, the built-in one and the bombs of
// TestBombsStopped; the corpus lives in testdata/fuzz/FuzzTemplate.
//
//	go test -run '^$' -fuzz FuzzTemplate ./internal/chat/
func FuzzTemplate(f *testing.F) {
	f.Add(Builtin, "Hi there")
	for _, name := range []string{"llama2.jinja", "llama3.jinja", "qwen2.jinja", "engine/gemma2-style.jinja", "engine/phi3-style.jinja"} {
		src, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), "Name a colour.")
	}
	f.Add(`{{ raise_exception('no') }}`, "x")
	f.Add(`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`, "x")
	f.Add(`{% macro m(f) %}{{ f(f) }}{% endmacro %}{{ m(m) }}`, "x")
	f.Add(`{% macro w(s) %}[{{ s }}]{% endmacro %}{% for m in messages %}{{ w(m.content) }}{% endfor %}`, "y")
	f.Add(`{% for m in messages %}{{ m.content|upper }}{{ m.role[0] }}{% endfor %}`, "\uE000")
	f.Add(`{{ 'x' * 1000000000000 }}{{ 'x' * -1 }}`, "x")
	f.Add(`{% for i in range(65536) %}{% for j in range(65536) %}{% endfor %}{% endfor %}`, "x")
	f.Add(`{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "x")
	f.Add(`{% set l = [] %}{% set _ = l.append(l) %}{{ l }}{{ l|tojson }}`, "x")
	f.Add(`{% set s = 'x' * 1000 %}{{ [s ~ 1, f(s ~ 2), {s ~ 3: s}] }}{% for c in s ~ 'y' if c %}{% set a = c %}{% endfor %}`, "x")
	f.Add(`{% macro m(x) %}{% macro i() %}{{ x }}{% endmacro %}{% call(v) i() %}{{ v }}{% endcall %}{% endmacro %}{% set j = joiner(',') %}{{ m(j() ~ 'a') }}`, "x")
	f.Add(`{% filter escape %}"{{ messages[0].content.strip('é').split(' ') }}{% endfilter %}{{ messages|selectattr('role', 'in', 'user')|list }}{{ '[1]'|from_json }}`, "é a b é")
	f.Add(`{{ messages[0].content|indent(-4) }}{{ messages[0].content.replace('', 'ab') }}{{ ('é' * 9)[0:99999999999] }}`, "a\nb")
	f.Fuzz(func(t *testing.T, src, content string) {
		if len(src) > 4096 {
			t.Skip()
		}
		fuzzOne(t, src, content)
	})
}

// fuzzOne is FuzzTemplate's check of one template and message.
func fuzzOne(t *testing.T, src, content string) {
	lim := Limits{Steps: 1 << 16, Bytes: 1 << 20, Value: 1 << 18, Timeout: 2 * time.Second}
	tmpl, err := New(Options{Source: src, BOS: "<s>", EOS: "</s>", Specials: []string{"<s>", "</s>"}, Limits: lim})
	if err != nil {
		if strings.Contains(err.Error(), "internal error") {
			t.Fatalf("the guarded rewrite of %q: %v", src, err)
		}
		return
	}
	msgs := []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: content}}
	if _, rerr := tmpl.Render(msgs, true); rerr != nil && rerr.Message == "" {
		t.Fatalf("a render error without a message: %#v", rerr)
	}
	// A render the guards let through is the bare engine's, byte for
	// byte: it ran the same operations on the same values. Not where
	// a guard does the operation itself: it may skip work the engine
	// does (an indent string no line gets), and where the engine
	// panics (a negative count) it answers as Python does.
	for _, op := range []string{"*", "indent", "replace", "format", "join"} {
		if strings.Contains(src, op) {
			return
		}
	}
	data := map[string]any{"messages": []any{map[string]any{"role": "user", "content": content}},
		"add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}
	g, b, gerr, berr, limited, err := renderBoth(src, data, lim)
	if err != nil || limited || gerr != nil || berr != nil && strings.Contains(berr.Error(), "panicked") {
		return
	}
	if berr != nil || g != b {
		t.Fatalf("%q: guarded %q, bare %q (%v)", src, g, b, berr)
	}
}
