package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzTemplate: a chat template comes from a model file, which the
// operator may not have written; compiling and rendering any template,
// with any message content, returns a template or an error and never
// panics. The seeds are the real templates in testdata and the built-in
// one; the corpus lives in testdata/fuzz/FuzzTemplate.
//
//	go test -run '^$' -fuzz FuzzTemplate ./internal/chat/
func FuzzTemplate(f *testing.F) {
	f.Add(Builtin, "Hi there")
	for _, name := range []string{"llama2.jinja", "llama3.jinja", "qwen2.jinja"} {
		src, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), "Name a colour.")
	}
	f.Add(`{{ raise_exception('no') }}`, "x")
	f.Add(`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`, "x")
	f.Add(`{% macro w(s) %}[{{ s }}]{% endmacro %}{% for m in messages %}{{ w(m.content) }}{% endfor %}`, "y")
	f.Add(`{% for m in messages %}{{ m.content|upper }}{{ m.role[0] }}{% endfor %}`, "\uE000")
	f.Fuzz(func(t *testing.T, src, content string) {
		if len(src) > 4096 || strings.Contains(src, "range") || strings.Contains(src, "*") {
			// Nested loops over ranges and repeated strings exhaust time
			// or memory by construction (range is bounded per call, but
			// not their product); that is a model file's denial of
			// service, not a crash, so the fuzzer leaves them out.
			// Recursive macros are in: New must refuse them.
			t.Skip()
		}
		tmpl, err := New(Options{Source: src, BOS: "<s>", EOS: "</s>", Specials: []string{"<s>", "</s>"}})
		if err != nil {
			return
		}
		msgs := []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: content}}
		if _, rerr := tmpl.Render(msgs, true); rerr != nil && rerr.Message == "" {
			t.Fatalf("a render error without a message: %#v", rerr)
		}
	})
}
