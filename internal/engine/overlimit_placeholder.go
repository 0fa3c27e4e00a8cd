//go:build bulkhead_placeholder

package engine

import "github.com/bulkhead-llm/bulkhead/internal/errkind"

// overLimit, in this deliberately broken build, re-introduces the bug of
// DESIGN.md section 1: a request over a limit is not rejected; its prompt
// is swapped for a one-token placeholder and it carries on. It exists so
// the test suite can prove it catches that bug:
//
//	go test -tags bulkhead_placeholder ./...   # must FAIL
func overLimit(req Request, _ *errkind.Error) (Request, *errkind.Error) {
	req.Prompt = req.Prompt[:1]
	return req, nil
}
