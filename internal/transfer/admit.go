//go:build !bulkhead_placeholder

package transfer

import "github.com/bulkhead-llm/bulkhead/internal/errkind"

// admitTokens is the sender's last line of admission: a transfer over the
// prefill side's limit fails before any frame leaves. (The build tag
// bulkhead_placeholder swaps in the historical bug, see admit_placeholder.go.)
func admitTokens(n, limit int) (int, *errkind.Error) {
	if limit > 0 && n > limit {
		return 0, errf(errkind.BadInput, CodeTooLong, "prompt has %d tokens; this prefill server accepts at most %d", n, limit)
	}
	return n, nil
}
