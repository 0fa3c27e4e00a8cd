package audit

import (
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// TestPromptsFitSmallContext: on the shipped model (a 512-piece vocabulary,
// so long token counts for short texts), every probe and canary prompt of
// a plan, chat-rendered or not, fits a 200-token input limit with
// max_tokens to spare, and every over-limit text prompt is over the
// context it was made for.
func TestPromptsFitSmallContext(t *testing.T) {
	tok, err := tokenizer.FromLlama2C(embedded.Tokenizer, 512)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(Config{Tenants: []string{"acme", "globex", "initech-long-name"}, Model: "m", Seed: 99, Rounds: 1, ContextLen: 256, Nonce: "0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, r := range p.Requests {
		if r.PromptText() == "" {
			continue
		}
		n := len(tok.Encode(r.PromptText(), true))
		switch r.Kind {
		case OverLimit:
			if n <= 256 {
				t.Errorf("%s: %d tokens, not over the 256-token context", r.String(), n)
			}
		default:
			longest = max(longest, n)
			if n+DefaultMaxTokens > 200 {
				t.Errorf("%s: %d tokens + %d max_tokens is over 200", r.String(), n, DefaultMaxTokens)
			}
		}
	}
	t.Logf("longest probe or canary: %d tokens", longest)
	start := time.Now()
	n := len(tok.Encode(overLimitText("canary-x-0123456789abcdef", DefaultOverLength), true))
	t.Logf("default over-limit text: %d tokens, encoded in %v", n, time.Since(start))
}
