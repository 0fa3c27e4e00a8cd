package chat

import (
	"fmt"
	"math"
	"strings"

	"github.com/ardanlabs/jinja"
)

// A chat template comes from the model file, and the Jinja engine has no
// limits of its own. Without them, one template could take the whole
// server down at the first chat request:
//   - a macro that calls itself overflows the goroutine stack, which kills
//     the process (a fatal error, not a panic);
//   - 'x' * 10**12, or a replace, join, format or indent of large pieces,
//     asks for more memory than there is in one allocation, which kills
//     the process too;
//   - a string doubled in a loop, or a list that holds itself and is
//     printed, grows without end;
//   - loops nested over range() run for days;
//   - thousands of large values pending in one list literal or call, or
//     captured by functions that are stored, take all the memory before
//     any of them is stored (held.go);
//   - an operation the engine does without a guard (indexing a long
//     string, trimming it by a set of characters) runs on between two
//     reads of the clock (held.go, ops_scan.go).
//
// Recursion is bounded at render time, not refused at load: real
// templates recurse on purpose (Gemma 4, gpt-oss and Qwen3.5 render tool
// schemas that way), and a macro can reach itself in ways no reading of
// the source sees (passed to itself as an argument, or stored in a
// namespace). The call-depth guard stops any of them at Limits.Depth.
//
// New compiles the template twice: as written, for its errors
// and its syntax tree (tree.go), and rewritten from that tree with a guard
// around every operation that can loop, call, grow a value or write
// (instrument.go, instrument_expr.go, instrument_hold.go). The guards
// (budget.go, held.go, ops.go, ops_scan.go) keep an account per render
// against its Limits (what it keeps and what it holds, its steps, its
// time, its depth), and stop a render that goes over with an error for
// that request. The render runs on the caller's goroutine: a guard that
// fails makes the engine return, and nothing is left running. New refuses, with a message, the few constructs
// whose cost it cannot account for, and a template so large or so deeply
// nested that compiling or walking it is itself a risk. range() builds at
// most maxRangeItems items.

// maxSource bounds a chat template's source. The engine parses by
// recursion, so the source bounds the stack New needs; real templates are
// a few kilobytes, the longest tens.
const maxSource = 256 << 10

// maxRangeItems bounds the list one call of range() may build; chat
// templates loop over messages, not over numbers, and use range, when at
// all, for a handful of items.
const maxRangeItems = 1 << 16

// compileBounded compiles src with the guards in place (see above).
func compileBounded(src string) (*jinja.Template, error) {
	if len(src) > maxSource {
		return nil, fmt.Errorf("chat template: %d bytes is more than the %d this server accepts", len(src), maxSource)
	}
	if strings.Contains(src, guardPrefix) {
		return nil, fmt.Errorf("chat template: names beginning with %q are reserved for this server's guards", guardPrefix)
	}
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	tree, err := readTree(tmpl)
	if err != nil {
		return nil, fmt.Errorf("chat template: this server cannot bound its rendering: %w", err)
	}
	guarded, err := instrument(tree)
	if err != nil {
		return nil, fmt.Errorf("chat template: this server cannot bound its rendering: %w", err)
	}
	tmpl, err = jinja.Compile(guarded)
	if err != nil {
		// The rewrite is this package's, so this is its bug, not the
		// template's; refusing is still better than rendering unguarded.
		return nil, fmt.Errorf("chat template: internal error: the guarded template does not compile: %w", err)
	}
	return tmpl, nil
}

// renderSafely renders tmpl, turning a panic in the engine into an error.
// The guards leave the engine no known way to panic (strings.Repeat with
// a negative count is done by the guards); this is for the unknown ones,
// which must fail one request, not the server.
func renderSafely(tmpl *jinja.Template, vals map[string]jinja.Value) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("the template engine panicked: %v", p)
		}
	}()
	return tmpl.RenderValues(vals)
}

// boundedRange is Jinja's range(), refusing to build more than
// maxRangeItems items.
func boundedRange(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var n [3]int64
	for i, a := range args {
		if i >= 3 {
			break
		}
		switch {
		case a.IsInt():
			n[i] = a.AsInt()
		case a.IsFloat() && !math.IsNaN(a.AsFloat()) && math.Abs(a.AsFloat()) < 1<<62:
			n[i] = int64(a.AsFloat())
		case a.IsBool():
			if a.AsBool() {
				n[i] = 1
			}
		default:
			return jinja.Undefined(), fmt.Errorf("range: argument %d is %s, not a number", i+1, a.String())
		}
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(args) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), fmt.Errorf("range: step must not be zero")
	}
	// The count in floating point: exact enough to compare with the
	// bound, and free of the overflow int64 arithmetic would risk.
	count := math.Ceil((float64(stop) - float64(start)) / float64(step))
	if count > maxRangeItems {
		return jinja.Undefined(), fmt.Errorf("range: %.0f items is more than the %d a chat template may build", count, maxRangeItems)
	}
	// Counted, not compared with stop: a step near the int64 limit would
	// wrap past stop and never end.
	items := make([]jinja.Value, 0, max(0, int(count)))
	for k := int64(0); k < int64(count); k++ {
		items = append(items, jinja.NewInt(start+k*step))
	}
	return jinja.NewList(items), nil
}
