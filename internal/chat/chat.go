package chat

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Builtin is the template used when a model has no chat template (the
// embedded stories260K has none). Such models are base models that continue
// text, so it adds no role markers they never saw: it is the content of
// each message in order, separated by a blank line, and
// add_generation_prompt adds nothing. A single user message is therefore
// exactly its content, as a completion prompt would be.
const Builtin = `{%- for message in messages -%}
{%- if not loop.first %}{{ '\n\n' }}{% endif -%}
{{ message.content }}
{%- endfor -%}`

// Message is one chat message. Content is plain text.
type Message struct {
	Role    string
	Content string
}

// Options configure a Template.
type Options struct {
	// Source is the Jinja template; empty uses Builtin.
	Source string
	// BOS and EOS are the text of the model's BOS and EOS tokens, given to
	// the template as bos_token and eos_token.
	BOS, EOS string
	// Specials are the texts of the model's special tokens (control and
	// user-defined). Render refuses message content containing one of them
	// when it cannot tell message text from template text (see Render).
	Specials []string
	// Limits bound each render (zero fields: DefaultLimits).
	Limits Limits
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl     *jinja.Template // the instrumented template (instrument.go)
	builtin  bool
	opts     Options
	lim      Limits
	specials []string
}

// New compiles opts.Source (or Builtin). A template that does not compile
// is an error naming the problem; it is the model's or the operator's fault,
// so the server should refuse to start rather than fail each request. So is
// one that this package cannot bound (see guard.go): one too large, or using
// a construct whose cost it cannot account for.
func New(opts Options) (*Template, error) {
	src, builtin := opts.Source, false
	if strings.TrimSpace(src) == "" {
		src, builtin = Builtin, true
	}
	tmpl, err := compileBounded(src)
	if err != nil {
		return nil, err
	}
	var specials []string
	for _, s := range opts.Specials {
		if s != "" {
			specials = append(specials, s)
		}
	}
	return &Template{tmpl: tmpl, builtin: builtin, opts: opts, lim: opts.Limits.orDefaults(), specials: specials}, nil
}

// IsBuiltin reports whether t is the built-in template.
func (t *Template) IsBuiltin() bool { return t.builtin }

// Segment is a run of the rendered prompt. Special is true for text the
// template wrote, which may spell special tokens (such as "<|im_start|>")
// that must become their ids; false for text that came from a message,
// which must be tokenized as plain text.
type Segment struct {
	Text    string
	Special bool
}

// Text joins segments into the full prompt text.
func Text(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

// Sentinels around message content in the second render. They are
// private-use code points no tokenizer gives meaning to; content that
// contains them is handled by the fallback.
const (
	openMark  = "\uE000"
	closeMark = "\uE001"
)

// Render applies the template to msgs. Errors are *errkind.Error: a
// template that calls raise_exception (for instance "Conversation roles
// must alternate") is BadInput with the template's message; a render that
// goes over the template's Limits is Internal with code chat_template_limit,
// saying which limit; any other rendering failure is Internal, since the
// template, not the request, is at fault.
//
// To know which text came from messages, Render renders twice: once as is
// and once with each content wrapped in sentinel characters. When removing
// the sentinels from the second gives the first (the template copied
// content verbatim), the sentinels mark the message spans exactly. When it
// does not (a template that transforms content, e.g. with |trim on content
// that has surrounding spaces), Render returns one Special segment and
// rejects content that contains a special token's text, as BadInput.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) ([]Segment, *errkind.Error) {
	// One deadline for both renders: Limits.Timeout is what a request
	// may cost, and a template that nearly ran out the first time would
	// otherwise take the whole of it again.
	deadline := now().Add(t.lim.Timeout)
	plain, err := t.render(msgs, addGenerationPrompt, false, deadline)
	if err != nil {
		return nil, err
	}
	marked, err := t.render(msgs, addGenerationPrompt, true, deadline)
	if err != nil && err.Code == codeLimit {
		return nil, err // the request's budget ran out in the second render
	}
	if err == nil && !contentHasMarks(msgs) {
		if segs, ok := split(marked); ok && Text(segs) == plain {
			return segs, nil
		}
	}
	for i, m := range msgs {
		for _, s := range t.specials {
			if strings.Contains(m.Content, s) {
				return nil, &errkind.Error{Kind: errkind.BadInput, Code: "invalid_value", Param: fmt.Sprintf("messages[%d].content", i),
					Message: fmt.Sprintf("messages[%d].content contains %q, the text of one of the model's special tokens, which this model's chat template cannot keep apart from its own markup", i, s)}
			}
		}
	}
	return []Segment{{Text: plain, Special: true}}, nil
}

func contentHasMarks(msgs []Message) bool {
	for _, m := range msgs {
		if strings.Contains(m.Content, openMark) || strings.Contains(m.Content, closeMark) {
			return true
		}
	}
	return false
}

// codeLimit is the error code of a render stopped by its Limits.
const codeLimit = "chat_template_limit"

// raised carries raise_exception's message out of the Jinja engine, which
// wraps errors as text.
type raised struct{ msg string }

func (t *Template) render(msgs []Message, addGen, mark bool, deadline time.Time) (string, *errkind.Error) {
	input := len(t.opts.BOS) + len(t.opts.EOS)
	list := make([]any, len(msgs))
	for i, m := range msgs {
		input += len(m.Role) + len(m.Content)
		c := m.Content
		if mark {
			c = openMark + c + closeMark
		}
		list[i] = map[string]any{"role": m.Role, "content": c}
	}
	var r *raised
	data := map[string]any{
		"messages":              list,
		"add_generation_prompt": addGen,
		"bos_token":             t.opts.BOS,
		"eos_token":             t.opts.EOS,
	}
	vals := make(map[string]jinja.Value, len(data)+1)
	for k, v := range data {
		vals[k] = jinja.FromGoValue(v)
	}
	st := newAccount(t.lim, input, deadline)
	for name, g := range st.guards() {
		vals[name] = jinja.NewCallable(name, g)
	}
	vals["range"] = jinja.NewCallable("range", boundedRange)
	vals["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "the chat template rejected the conversation"
		if len(args) > 0 {
			msg = args[0].String()
		}
		r = &raised{msg: msg}
		return jinja.Undefined(), fmt.Errorf("raise_exception: %s", msg)
	})
	out, err := renderSafely(t.tmpl, vals)
	switch {
	case r != nil:
		return "", &errkind.Error{Kind: errkind.BadInput, Code: "invalid_value", Param: "messages",
			Message: "the model's chat template rejected the messages: " + r.msg}
	case st.err != nil:
		return "", &errkind.Error{Kind: errkind.Internal, Code: codeLimit,
			Message: "the model's chat template was stopped: " + st.err.msg}
	case err != nil:
		return "", errkind.Wrap(errkind.Internal, "chat_template_error", redact(err, msgs), "the model's chat template failed to render")
	}
	return out, nil
}

// quoted matches what the Jinja engine's messages quote: the values they
// choke on.
var quoted = regexp.MustCompile(`'[^']*'|"[^"]*"`)

// redact is err's text with what may have come from the request cut out,
// since the server logs it and message content is never logged: each
// message's content and role where they appear verbatim, and every quoted
// value (fromjson quotes the character of the content it stopped at). The
// shape of the failure, which the operator needs to mend the template,
// stays.
func redact(err error, msgs []Message) error {
	text := err.Error()
	for _, m := range msgs {
		for _, v := range []string{m.Content, m.Role} {
			if v != "" {
				text = strings.ReplaceAll(text, v, "<redacted>")
			}
		}
	}
	return errors.New(quoted.ReplaceAllString(text, "'<redacted>'"))
}

// split cuts a sentinel-marked render into segments. It fails on
// unbalanced or nested sentinels.
func split(s string) ([]Segment, bool) {
	var segs []Segment
	add := func(text string, special bool) {
		if text == "" {
			return
		}
		if n := len(segs); n > 0 && segs[n-1].Special == special {
			segs[n-1].Text += text
			return
		}
		segs = append(segs, Segment{Text: text, Special: special})
	}
	for {
		o := strings.Index(s, openMark)
		if o < 0 {
			if strings.Contains(s, closeMark) {
				return nil, false
			}
			add(s, true)
			return segs, true
		}
		if strings.Contains(s[:o], closeMark) {
			return nil, false
		}
		add(s[:o], true)
		s = s[o+len(openMark):]
		c := strings.Index(s, closeMark)
		if c < 0 || strings.Contains(s[:c], openMark) {
			return nil, false
		}
		add(s[:c], false)
		s = s[c+len(closeMark):]
	}
}
