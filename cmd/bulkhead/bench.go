package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peer"
	"github.com/bulkhead-llm/bulkhead/internal/perf"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

func init() {
	register("bench", "measure: 'bench model' (a model file's prefill and decode speed), 'bench load' (an OpenAI-compatible endpoint under load)", runBench)
}

const benchUsage = "usage: bulkhead bench model [flags]   a model file's prefill and decode speed\n       bulkhead bench load [flags]    an OpenAI-compatible endpoint under load\nRun 'bulkhead bench model -h' or 'bulkhead bench load -h' for their flags.\n"

func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{err: errors.New("which benchmark? 'bench model' or 'bench load'"), usage: benchUsage}
	}
	switch args[0] {
	case "model":
		return runBenchModel(args[1:], stdout, stderr)
	case "load":
		return runBenchLoad(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		return helpRequest{text: benchUsage}
	default:
		return usageError{err: fmt.Errorf("unknown benchmark %q (known: model, load)", args[0]), usage: benchUsage}
	}
}

// modelBench is the JSON result of `bench model`.
type modelBench struct {
	Model                 string  `json:"model"`
	WeightType            string  `json:"weight_type"`
	KVDType               string  `json:"kv_dtype"`
	Threads               int     `json:"threads"`
	Kernels               string  `json:"kernels"`
	PromptTokens          int     `json:"prompt_tokens"`
	GenTokens             int     `json:"gen_tokens"`
	PrefillTokensPerS     float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS      float64 `json:"decode_tokens_per_s"`
	WeightBytesPerToken   int64   `json:"weight_bytes_per_token"`
	ReadBandwidthBytesPS  float64 `json:"read_bandwidth_bytes_per_s"`
	DecodeBandwidthBytesS float64 `json:"decode_weight_bytes_per_s"`
	BandwidthFraction     float64 `json:"bandwidth_fraction"`
	// BandwidthFractionReps is each rep's decode against the mean of the
	// bandwidths measured right before and right after it;
	// BandwidthFraction is their median. On a
	// shared machine the bandwidth drifts by tens of percent within a
	// minute, so a decode figure is only judged against its neighbour.
	BandwidthFractionReps []float64 `json:"bandwidth_fraction_reps"`
	// KVBytesPerToken is the mean KV cache a decode step reads (keys and
	// values of every earlier position, all layers) over the decode, and
	// BandwidthFractionWithKV is BandwidthFraction counting those bytes
	// too: attention's reads come from memory as well, so this is what the
	// step actually streams. The goal is stated on weights alone.
	KVBytesPerToken         int64   `json:"kv_bytes_per_token"`
	BandwidthFractionWithKV float64 `json:"bandwidth_fraction_with_kv"`
	StartToFirstTokenMS     float64 `json:"start_to_first_token_ms"`
	// HandoffNSReps is, for each rep, the round trip of a cache line
	// between two threads (perf.HandoffLatency), measured before the
	// bandwidth probe that precedes its decode: where the host placed the
	// threads, which the bandwidth and the decode's share of it depend on
	// (docs/benchmarks.md). The placement can change within a rep. Absent
	// for one thread.
	HandoffNSReps []float64 `json:"handoff_ns_reps,omitempty"`

	// MACCeilingPerS is the arithmetic ceiling of the batched products for
	// these weights on these threads (perf.MACRate), measured right before
	// and right after each rep's prefill; PrefillMACsPerS is the best
	// prefill's multiply-adds per second (matrix products only), and
	// PrefillCeilingFractionReps each rep's against its own ceiling, with
	// PrefillCeilingFraction their median. Prefill is bound by arithmetic
	// as decode is by bandwidth. Absent in builds without SIMD kernels.
	MACCeilingPerS             float64   `json:"mac_ceiling_per_s,omitempty"`
	PrefillMACsPerS            float64   `json:"prefill_macs_per_s,omitempty"`
	PrefillCeilingFraction     float64   `json:"prefill_ceiling_fraction,omitempty"`
	PrefillCeilingFractionReps []float64 `json:"prefill_ceiling_fraction_reps,omitempty"`

	// The llama.cpp peer on the same file and thread count, when --peer.
	Peer              *peer.BenchResult `json:"llama_cpp,omitempty"`
	PrefillVsLlamaCpp float64           `json:"prefill_vs_llama_cpp,omitempty"`
	DecodeVsLlamaCpp  float64           `json:"decode_vs_llama_cpp,omitempty"`
}

func runBenchModel(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench model")
	var mf modelFlags
	mf.register(fs)
	promptN := fs.Int("prompt-tokens", 256, "prompt length for the prefill measurement")
	genN := fs.Int("gen-tokens", 256, "tokens to decode for the decode measurement")
	reps := fs.Int("reps", 3, "repetitions; the best is reported")
	asJSON := fs.Bool("json", false, "print one JSON object on the last line")
	withPeer := fs.Bool("peer", false, "also measure llama.cpp (node-llama-cpp in tools/node) on the same GGUF file and thread count, and report the ratios")
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"prompt-tokens", *promptN}, {"gen-tokens", *genN}, {"reps", *reps}} {
		if err := checkRange(f.name, f.v, 1, math.MaxInt); err != nil {
			return err
		}
	}
	kvt, err := mf.kvType()
	if err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	start := time.Now()
	m, err := model.Open(mf.model, mf.tokenizer)
	if err != nil {
		return err
	}
	defer m.Close()
	if *promptN > m.Config.ContextLen || *genN > m.Config.ContextLen-1 { // not 1+*genN: that can overflow
		return usagef("--prompt-tokens %d or 1 + --gen-tokens %d exceed the model's context of %d", *promptN, *genN, m.Config.ContextLen)
	}
	pool := kernels.NewPool(mf.threads)
	defer pool.Close()
	r := m.NewRunner(pool, *promptN, max(*promptN, 1+*genN))
	res := modelBench{Model: m.Name, WeightType: m.WeightType.String(), KVDType: kvt.String(), Threads: pool.Threads(), Kernels: kernels.Features(),
		PromptTokens: *promptN, GenTokens: *genN, WeightBytesPerToken: m.WeightBytesPerToken()}

	// Start to first token: load, one prompt pass, one sample; what a user
	// of `bulkhead generate` waits for.
	prompt := make([]int, *promptN)
	for i := range prompt {
		prompt[i] = 3 + (i*7919)%(m.Config.Vocab-3) // deterministic, avoids special tokens
	}
	prompt[0] = max(0, m.Tokenizer.BOS())
	cache, err := model.NewDenseCacheOf(&m.Config, max(*promptN, 1+*genN), kvt)
	if err != nil {
		return err
	}
	logits := make([]float32, m.Config.Vocab)
	seq := &model.Seq{Tokens: prompt[:min(8, len(prompt))], Cache: cache, Logits: logits}
	if err := r.Forward([]*model.Seq{seq}); err != nil {
		return err
	}
	sample.Greedy(logits)
	res.StartToFirstTokenMS = float64(time.Since(start).Microseconds()) / 1000

	layerMACs, outMACs := m.MACsPerToken()
	// A prompt's pass runs the layers for every token and the classifier
	// for the last one only.
	macsPerPrompt := float64(int64(*promptN)*layerMACs + outMACs)
	var prefill, decode, bw, ceil []float64
	for rep := 0; rep < *reps; rep++ {
		seq := &model.Seq{Tokens: prompt, Cache: cache, Logits: logits}
		before := perf.MACRate(m.WeightType, pool.Threads(), 3)
		t0 := time.Now()
		if err := r.Forward([]*model.Seq{seq}); err != nil {
			return err
		}
		prefill = append(prefill, float64(*promptN)/time.Since(t0).Seconds())
		ceil = append(ceil, (before+perf.MACRate(m.WeightType, pool.Threads(), 3))/2)
		// Decode as llama-bench's tg test and the llama.cpp peer measure
		// it: one sequence, one token per step, from a context holding
		// only the first token, so both sides read the same KV.
		seq = &model.Seq{Tokens: prompt[:1], Cache: cache, Logits: logits}
		if err := r.Forward([]*model.Seq{seq}); err != nil {
			return err
		}
		tok := []int{sample.Greedy(logits)}
		if pool.Threads() > 1 {
			res.HandoffNSReps = append(res.HandoffNSReps, float64(perf.HandoffLatency(5).Nanoseconds()))
		}
		// The machine's bandwidth drifts within seconds, so the decode is
		// judged against the mean of measurements taken right before and
		// right after it.
		before = perf.ReadBandwidth(512<<20, pool.Threads(), 3)
		t0 = time.Now()
		for i := 0; i < *genN; i++ {
			seq.Tokens, seq.Pos = tok, 1+i
			if err := r.Forward([]*model.Seq{seq}); err != nil {
				return err
			}
			tok[0] = sample.Greedy(logits)
		}
		decode = append(decode, float64(*genN)/time.Since(t0).Seconds())
		bw = append(bw, (before+perf.ReadBandwidth(512<<20, pool.Threads(), 3))/2)
	}
	res.PrefillTokensPerS = best(prefill)
	res.DecodeTokensPerS = best(decode)
	for i := range decode {
		res.BandwidthFractionReps = append(res.BandwidthFractionReps, decode[i]*float64(res.WeightBytesPerToken)/bw[i])
	}
	res.BandwidthFraction = median(res.BandwidthFractionReps)
	// Decode step i runs at position 1+i and attends to positions 0..1+i,
	// 2+i of them: 2+(genN-1)/2 on average over the decode (rounded down).
	res.KVBytesPerToken = int64(m.Config.KVBytesPerToken(kvt)) * int64(2+(*genN-1)/2)
	res.BandwidthFractionWithKV = res.BandwidthFraction * float64(res.WeightBytesPerToken+res.KVBytesPerToken) / float64(res.WeightBytesPerToken)
	res.ReadBandwidthBytesPS = median(bw)
	res.DecodeBandwidthBytesS = res.DecodeTokensPerS * float64(res.WeightBytesPerToken)
	if ceil[0] > 0 {
		for i := range prefill {
			res.PrefillCeilingFractionReps = append(res.PrefillCeilingFractionReps, prefill[i]*macsPerPrompt/float64(*promptN)/ceil[i])
		}
		res.PrefillCeilingFraction = median(res.PrefillCeilingFractionReps)
		res.MACCeilingPerS = median(ceil)
		res.PrefillMACsPerS = res.PrefillTokensPerS * macsPerPrompt / float64(*promptN)
	}
	if *withPeer {
		if mf.model == "" || mf.tokenizer != "" {
			return usagef("--peer needs a GGUF --model (llama.cpp reads GGUF only); make one with 'bulkhead convert'")
		}
		if err := peer.Available(); err != nil {
			return err
		}
		pr, err := peer.Bench(context.Background(), mf.model, res.Threads, *promptN, *genN, *reps)
		if err != nil {
			return err
		}
		if !(pr.PrefillTokensPerS > 0 && pr.DecodeTokensPerS > 0) {
			return fmt.Errorf("llama.cpp reported prefill %v and decode %v tokens/s; no ratio can be formed", pr.PrefillTokensPerS, pr.DecodeTokensPerS)
		}
		res.Peer = &pr
		res.PrefillVsLlamaCpp = res.PrefillTokensPerS / pr.PrefillTokensPerS
		res.DecodeVsLlamaCpp = res.DecodeTokensPerS / pr.DecodeTokensPerS
	}

	fmt.Fprintf(stdout, "model            %s (%s weights, %s KV cache, %s kernels, %d threads)\n", res.Model, res.WeightType, res.KVDType, res.Kernels, res.Threads)
	fmt.Fprintf(stdout, "prefill          %.1f tokens/s (%d-token prompt, best of %d)\n", res.PrefillTokensPerS, *promptN, *reps)
	fmt.Fprintf(stdout, "decode           %.1f tokens/s (%d tokens, best of %d)\n", res.DecodeTokensPerS, *genN, *reps)
	fmt.Fprintf(stdout, "weights/token    %.1f MB (and %.1f MB of %s KV cache on average)\n", float64(res.WeightBytesPerToken)/1e6, float64(res.KVBytesPerToken)/1e6, res.KVDType)
	fmt.Fprintf(stdout, "read bandwidth   %.1f GB/s median, measured with %d threads before and after each rep's decode; best decode reads %.1f GB/s\n",
		res.ReadBandwidthBytesPS/1e9, res.Threads, res.DecodeBandwidthBytesS/1e9)
	fmt.Fprintf(stdout, "of bandwidth     %.0f%% median of each rep against its own bandwidth (%s); %.0f%% counting the KV cache's bytes\n", 100*res.BandwidthFraction, joined(res.BandwidthFractionReps, 100, "%"), 100*res.BandwidthFractionWithKV)
	if len(res.HandoffNSReps) > 0 {
		fmt.Fprintf(stdout, "thread hand-off  %s ns round trip of a cache line between two threads, before each rep's decode (where the host placed them; see docs/benchmarks.md)\n", joined(res.HandoffNSReps, 1, ""))
	}
	if res.MACCeilingPerS > 0 {
		fmt.Fprintf(stdout, "arithmetic       best prefill does %.1f G multiply-adds/s in its products; the ceiling of %s products is %.1f G/s median, measured with %d threads before and after each rep's prefill\n",
			res.PrefillMACsPerS/1e9, res.WeightType, res.MACCeilingPerS/1e9, res.Threads)
		fmt.Fprintf(stdout, "of ceiling       %.0f%% median of each rep's prefill against its own ceiling (%s)\n", 100*res.PrefillCeilingFraction, joined(res.PrefillCeilingFractionReps, 100, "%"))
	}
	fmt.Fprintf(stdout, "start→1st token  %.1f ms (load + first forward pass)\n", res.StartToFirstTokenMS)
	if p := res.Peer; p != nil {
		fmt.Fprintf(stdout, "llama.cpp        prefill %.1f tokens/s, decode %.1f tokens/s (%s)\n", p.PrefillTokensPerS, p.DecodeTokensPerS, p.Version)
		fmt.Fprintf(stdout, "ratio            prefill %.2fx, decode %.2fx llama.cpp\n", res.PrefillVsLlamaCpp, res.DecodeVsLlamaCpp)
	}
	if *asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return fmt.Errorf("bench model: the result cannot be written as JSON: %w", err)
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// joined writes each of xs times scale, rounded, then suffix, separated
// by commas: "80%, 73%" for fractions (100, "%"), "57, 67" for ns (1, "").
func joined(xs []float64, scale float64, suffix string) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.0f%s", scale*x, suffix)
	}
	return b.String()
}

func best(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)-1]
}
