package chat

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// requests are conversations in the shapes real templates read: system
// prompts, alternating turns, tools with JSON schemas, tool calls with
// object arguments, tool results, and text that looks like template or
// JSON syntax.
func requests() []map[string]any {
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "The weather in a city",
		"parameters": map[string]any{"type": "object", "required": []any{"location"}, "properties": map[string]any{
			"location": map[string]any{"type": "string", "description": "City, \"quoted\""},
			"unit":     map[string]any{"type": "string", "enum": []any{"c", "f"}},
			"days":     map[string]any{"type": "array", "items": map[string]any{"type": "integer"}},
			"options":  map[string]any{"type": "object", "properties": map[string]any{"hourly": map[string]any{"type": "boolean"}}},
		}}}}}
	chat := []any{
		map[string]any{"role": "system", "content": "You are terse."},
		map[string]any{"role": "user", "content": "Hi there"},
		map[string]any{"role": "assistant", "content": "Hello."},
		map[string]any{"role": "user", "content": "  Is {{ this }} {% a %} tag? \"q\" \\ {0} {} <b>é</b>\n  "},
	}
	calls := []any{
		map[string]any{"role": "system", "content": "Use tools."},
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": map[string]any{"location": "Paris", "days": []any{1, 2}, "options": map[string]any{"hourly": true}}}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": `{"temp": 21.5, "sky": "clear"}`},
		map[string]any{"role": "assistant", "content": "21.5 and clear.", "reasoning_content": "The tool said so."},
		map[string]any{"role": "user", "content": "Thanks"},
	}
	base := func(msgs []any, gen bool) map[string]any {
		return map[string]any{"messages": msgs, "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"}
	}
	withTools := base(calls, true)
	withTools["tools"] = tools
	thinking := base(chat, true)
	thinking["enable_thinking"], thinking["reasoning_effort"] = true, "high"
	return []map[string]any{base(chat, true), base(chat[1:2], false), base(chat[1:], true), withTools, thinking}
}

// renderBoth renders src with data through the guards, with limits lim,
// and through the bare engine, with the same range() and a
// raise_exception that fails. limited says the guards stopped the render.
func renderBoth(src string, data map[string]any, lim Limits) (guarded, bare string, gerr, berr error, limited bool, err error) {
	g, err := compileBounded(src)
	if err != nil {
		return "", "", nil, nil, false, err
	}
	b, err := jinja.Compile(src)
	if err != nil {
		return "", "", nil, nil, false, err
	}
	vals := func() map[string]jinja.Value {
		v := map[string]jinja.Value{"range": jinja.NewCallable("range", boundedRange)}
		for k, x := range data {
			v[k] = jinja.FromGoValue(x)
		}
		return v
	}
	gv := vals()
	st := newAccount(lim.orDefaults(), 0, time.Now().Add(lim.orDefaults().Timeout))
	for name, f := range st.guards() {
		gv[name] = jinja.NewCallable(name, f)
	}
	guarded, gerr = renderSafely(g, gv)
	if st.err != nil {
		return guarded, "", gerr, nil, true, nil
	}
	bare, berr = renderSafely(b, vals())
	return guarded, bare, gerr, berr, false, nil
}

// TestRealTemplates: the guards change nothing a real template renders.
// Every template in testdata, among them the Llama 3, Llama 3.2 (tools,
// tojson with indent), Qwen2 (ChatML), Ministral 3, Gemma 4, gpt-oss,
// Kimi K3, Qwen3.5, DeepSeek V4 and GLM 5.2 ones, renders each request
// byte for byte as the bare engine does, errors included. Several use
// macros that recurse; the guards bound that at render time.
func TestRealTemplates(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.jinja"))
	more, _ := filepath.Glob(filepath.Join("testdata", "engine", "*.jinja"))
	files = append(files, more...)
	if len(files) < 12 {
		t.Fatalf("only %d templates in testdata", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rendered := 0
		for i, data := range requests() {
			g, b, gerr, berr, limited, err := renderBoth(string(src), data, Limits{})
			switch {
			case err != nil || limited:
				t.Fatalf("%s: %v (stopped by a limit: %v)", f, err, limited)
			case (gerr == nil) != (berr == nil) || gerr != nil && gerr.Error() != berr.Error():
				t.Errorf("%s, request %d: guarded error %v, bare error %v", f, i, gerr, berr)
			case g != b:
				t.Errorf("%s, request %d: guarded\n%q\nbare\n%q", f, i, g, b)
			case gerr == nil:
				rendered++
			}
		}
		if rendered == 0 {
			t.Errorf("%s rendered no request", f)
		}
		// And through New and Render, with the sentinel pass: every real
		// template loads, recursive ones included.
		tmpl, err := New(Options{Source: string(src), BOS: "<s>", EOS: "</s>"})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, rerr := tmpl.Render([]Message{{Role: "user", Content: "Hi"}}, true); rerr != nil && rerr.Code == "chat_template_limit" {
			t.Errorf("%s: %v", f, rerr)
		}
	}
}
