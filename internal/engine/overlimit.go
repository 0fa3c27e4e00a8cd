//go:build !bulkhead_placeholder

package engine

import "github.com/bulkhead-llm/bulkhead/internal/errkind"

// overLimit decides the fate of a request over a limit: rejection, with
// the original error. (Building with the tag bulkhead_placeholder swaps in
// the historical bug instead; see overlimit_placeholder.go.)
func overLimit(req Request, rej *errkind.Error) (Request, *errkind.Error) { return req, rej }
