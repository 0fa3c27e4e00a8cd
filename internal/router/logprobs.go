package router

import (
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// Log probabilities across the split: decode sends those of the tokens it
// draws, but the first token is the prefill server's, and its figures come
// with the prefill's answer (peerapi.PrefillResult.FirstLogprobs), which
// the exchange settles (settleFirst) once the prefill leg's outcome is
// known.

// firstLogprobsWait bounds how long decode's first token waits for the
// prefill answer that carries its log probabilities. That answer follows
// decode's acknowledgement of the transfer within a round trip; one that
// takes seconds was lost. A variable for tests.
var firstLogprobsWait = 5 * time.Second

// settleFirst records the first token's log probabilities (nil: none
// came) once the prefill leg's outcome is known, and lets readDecode,
// which waits for them before it hands the first token on, go on.
func (x *exchange) settleFirst(lp *peerapi.Logprobs) {
	x.settled.Do(func() {
		x.first = lp.Sample()
		close(x.firstSet)
	})
}

// logprobsOf is the log probabilities of ev's tokens, entry for entry.
// When ev begins the stream (first), its first entry is the prefill
// server's, which decode cannot know: it waits for the prefill's answer,
// which can trail decode's first tokens by a moment (both follow decode's
// acknowledgement of the transfer). An answer that failed, or does not
// come within firstLogprobsWait, fails the request: decode's tokens stay
// unread meanwhile, and a made-up figure is no answer.
func (x *exchange) logprobsOf(ev peerapi.Event, first bool) ([]*sample.Logprobs, *errkind.Error) {
	lps := make([]*sample.Logprobs, len(ev.Tokens))
	for i := range lps {
		if i < len(ev.Logprobs) {
			lps[i] = ev.Logprobs[i].Sample()
		}
	}
	if !first || len(lps) == 0 || lps[0] != nil {
		return lps, nil
	}
	wait := time.NewTimer(firstLogprobsWait)
	defer wait.Stop()
	select {
	case <-x.firstSet:
		lps[0] = x.first
	case <-x.lctx.Done():
	case <-wait.C:
	}
	// Once the request is over, nothing reaches the client either way.
	if lps[0] == nil && x.lctx.Err() == nil {
		return nil, errkind.New(errkind.Unavailable, "logprobs_unavailable",
			"the prefill server's answer, which carries the first token's log probabilities, did not come")
	}
	return lps, nil
}
