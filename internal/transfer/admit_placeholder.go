//go:build bulkhead_placeholder

package transfer

import "github.com/bulkhead-llm/bulkhead/internal/errkind"

// admitTokens, in this deliberately broken build, re-introduces the bug of
// DESIGN.md section 1: a prompt over the limit is swapped for a one-token
// placeholder and the transfer carries on. The test suite must fail under
// this tag (go test -tags bulkhead_placeholder ./internal/transfer/).
func admitTokens(n, limit int) (int, *errkind.Error) {
	if limit > 0 && n > limit {
		return 1, nil
	}
	return n, nil
}
