//go:build bulkhead_placeholder

package transfer

import (
	"strings"
	"testing"
)

// TestPlaceholderIsCaught runs only in the deliberately broken build
// (go test -tags bulkhead_placeholder ./internal/transfer/), where a
// prompt over the prefill limit is swapped for a one-token placeholder.
// It passes when the simulation catches the bug; in the same build
// TestSim fails, which is the point: the suite can fail.
func TestPlaceholderIsCaught(t *testing.T) {
	caught := 0
	for s := uint64(scLimits); s < 2000; s += uint64(numScenarios) {
		if _, err := runSeed(s); err != nil {
			if !strings.Contains(err.Error(), "over the prefill limit") {
				t.Fatalf("seed %d: caught, but not by the limit check: %v", s, err)
			}
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("the placeholder bug ran through the limits scenario undetected")
	}
	t.Logf("the simulation caught the placeholder transfer in %d seeds", caught)
}
