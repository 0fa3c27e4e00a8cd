package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// `bench model --json` ends with one JSON object holding the figures the
// docs quote, each one a measurement (positive), and refuses bad flags
// with a usage error rather than a panic.
func TestBenchModelJSON(t *testing.T) {
	out, errOut, code := runCLI(t, "bench", "model", "--prompt-tokens", "16", "--gen-tokens", "8", "--reps", "2", "--threads", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res modelBench
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, out)
	}
	if res.PrefillTokensPerS <= 0 || res.DecodeTokensPerS <= 0 || res.ReadBandwidthBytesPS <= 0 || res.WeightBytesPerToken <= 0 {
		t.Fatalf("missing measurements: %+v", res)
	}
	if len(res.BandwidthFractionReps) != 2 || res.BandwidthFraction <= 0 {
		t.Fatalf("bandwidth fraction per rep %v, median %v; want 2 reps", res.BandwidthFractionReps, res.BandwidthFraction)
	}
	// Two threads measure their hand-off once a rep.
	if len(res.HandoffNSReps) != 2 || res.HandoffNSReps[0] <= 0 || res.HandoffNSReps[1] <= 0 {
		t.Fatalf("hand-off per rep %v, want 2 positive figures", res.HandoffNSReps)
	}
	if res.PromptTokens != 16 || res.GenTokens != 8 || res.Threads != 2 || res.KVDType != "f32" {
		t.Fatalf("echoed settings %d/%d/%d/%s, want 16/8/2/f32", res.PromptTokens, res.GenTokens, res.Threads, res.KVDType)
	}
	// stories260K: 5 layers, KV dimension 32; 8 decode steps attend to 2..9
	// positions, 5 on average (rounded down), of 2×5×32 float32s each.
	if want := int64(5 * 2 * 5 * 32 * 4); res.KVBytesPerToken != want || res.BandwidthFractionWithKV <= res.BandwidthFraction {
		t.Fatalf("KV bytes per token %d (want %d), fraction with KV %v against %v without", res.KVBytesPerToken, want, res.BandwidthFractionWithKV, res.BandwidthFraction)
	}
	// Prefill against the arithmetic ceiling, where the build has SIMD
	// kernels to measure one: 16 tokens through stories260K's layers
	// (226,560 multiply-adds each) and its classifier once (32,768).
	if res.MACCeilingPerS > 0 {
		perToken := float64(16*226560+32768) / 16
		if len(res.PrefillCeilingFractionReps) != 2 || res.PrefillCeilingFraction <= 0 ||
			math.Abs(res.PrefillMACsPerS-res.PrefillTokensPerS*perToken) > 1e-6*res.PrefillMACsPerS {
			t.Fatalf("prefill %v MAC/s (want %v × %v), ceiling fractions %v", res.PrefillMACsPerS, res.PrefillTokensPerS, perToken, res.PrefillCeilingFractionReps)
		}
	}
	for _, args := range [][]string{
		{"bench", "model", "--reps", "0"},
		{"bench", "model", "--prompt-tokens", "100000"},
	} {
		if _, errOut, code := runCLI(t, args...); code == 0 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
}
