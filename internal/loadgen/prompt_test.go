package loadgen

import (
	"strings"
	"testing"
)

func TestPrompt(t *testing.T) {
	seen := map[string]bool{}
	for i := range uint64(200) {
		p := Prompt(1, i, 96)
		if p != Prompt(1, i, 96) {
			t.Fatal("same seed and index gave different prompts")
		}
		if n := len(strings.Fields(p)); n < 96 || n > 96+20 {
			t.Errorf("prompt %d has %d words, want about 96", i, n)
		}
		// Distinct from the first words on, so that no prefix cache can
		// serve one request from another.
		head := strings.Join(strings.Fields(p)[:6], " ")
		if seen[head] {
			t.Errorf("prompt %d starts like an earlier one: %q", i, head)
		}
		seen[head] = true
	}
	if Prompt(1, 0, 50) == Prompt(2, 0, 50) {
		t.Error("seed does not change the prompt")
	}
	if p := Prompt(1, 0, 0); p == "" {
		t.Error("a zero length still gives one sentence")
	}
	if wordsForTokens(128) != 96 || wordsForTokens(1) != 1 {
		t.Error("wordsForTokens")
	}
}
