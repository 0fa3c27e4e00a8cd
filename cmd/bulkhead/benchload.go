package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/loadgen"
)

// runBenchLoad is `bulkhead bench load`: a load generator for any
// OpenAI-compatible endpoint. The work is in package loadgen; this file
// turns flags into a loadgen.Config and the report into text or JSON.
func runBenchLoad(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench load")
	target := fs.String("target", "", "base URL of the server, like http://127.0.0.1:8080 (required)")
	apiKey := fs.String("api-key", "", "bearer token to send (default: $OPENAI_API_KEY)")
	modelName := fs.String("model", "", "model to request (default: the first one GET /v1/models lists)")
	concList := fs.String("concurrency", "1,8,32", "comma-separated concurrency levels; one run per level")
	requests := fs.Int("requests", 64, "measured requests per level")
	warmup := fs.Int("warmup", 0, "unmeasured requests before the first level")
	promptTokens := fs.Int("prompt-tokens", 128, "approximate prompt length; each request gets its own story-like prompt")
	prompt := fs.String("prompt", "", "send this prompt with every request instead of generated ones")
	maxTokens := fs.Int("max-tokens", 128, "max_tokens of each request")
	endpoint := fs.String("endpoint", "completions", "API to load: completions or chat")
	temperature := fs.Float64("temperature", 0, "sampling temperature")
	timeout := fs.Duration("timeout", 60*time.Second, "deadline of each request, to the end of its stream")
	seed := fs.Uint64("seed", 1, "seed of the generated prompts")
	asJSON := fs.Bool("json", false, "print one JSON object per level, then one summarising all levels")
	allowRemote := fs.Bool("allow-remote", false, "permit a target that is not a loopback address")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *target == "" {
		return usagef("--target is required, like --target http://127.0.0.1:8080")
	}
	if _, err := loadgen.CheckTarget(*target, *allowRemote); err != nil {
		if errors.Is(err, loadgen.ErrNotLoopback) {
			return usagef("%v; pass --allow-remote only for a server you are allowed to load", err)
		}
		return usagef("--target: %v", err)
	}
	// The ranges loadgen.Run checks too, here named by their flags.
	if err := checkRange("requests", *requests, 1, loadgen.MaxRequests); err != nil {
		return err
	}
	if err := checkRange("warmup", *warmup, 0, loadgen.MaxRequests); err != nil {
		return err
	}
	if *prompt == "" {
		if err := checkRange("prompt-tokens", *promptTokens, 1, loadgen.MaxPromptTokens); err != nil {
			return err
		}
	}
	if err := checkRange("max-tokens", *maxTokens, 1, loadgen.MaxCompletionTokens); err != nil {
		return err
	}
	if !(*temperature >= 0 && *temperature <= math.MaxFloat64) { // NaN and +Inf too: no JSON form
		return usagef("--temperature must be a finite number, 0 or more, got %v", *temperature)
	}
	if *timeout <= 0 {
		return usagef("--timeout must be a positive duration, got %v", *timeout)
	}
	levels, err := parseLevels(*concList)
	if err != nil {
		return usagef("--concurrency %q: %v", *concList, err)
	}
	if top := slices.Max(levels); *requests < top {
		// Such a level never has more than --requests in flight: its
		// figures would be labelled with a concurrency it never reached.
		return usagef("--requests %d is below --concurrency %d: that level could never have %d requests in flight; send at least as many requests as the highest level", *requests, top, top)
	}
	ep := loadgen.Endpoint(*endpoint)
	if ep != loadgen.Completions && ep != loadgen.Chat {
		return usagef("--endpoint %q: want completions or chat", *endpoint)
	}
	if *apiKey == "" {
		*apiKey = os.Getenv("OPENAI_API_KEY")
	}
	if badHeaderValue(*apiKey) {
		// Go's transport refuses such a header before sending: every
		// request would fail, and be counted, as a transport error.
		return usagef("--api-key (or $OPENAI_API_KEY) holds a control character, such as a line ending copied from a file; the key is not shown")
	}
	cfg := loadgen.Config{
		Target: *target, APIKey: *apiKey, Model: *modelName, Endpoint: ep,
		Concurrency: levels, Requests: *requests, Warmup: *warmup,
		Prompt: *prompt, PromptTokens: *promptTokens, MaxTokens: *maxTokens,
		Temperature: *temperature, Timeout: *timeout, Seed: *seed, AllowRemote: *allowRemote,
	}
	if bar := newProgressBar(stderr); bar != nil {
		cfg.Progress = bar.update
		defer bar.clear()
		cfg.OnLevel = func(loadgen.LevelReport) { bar.clear() }
	}
	var out reportWriter = &textReport{w: stdout, cfg: &cfg}
	if *asJSON {
		out = &jsonReport{w: stdout}
	}
	onLevel := cfg.OnLevel
	cfg.OnLevel = func(l loadgen.LevelReport) {
		if onLevel != nil {
			onLevel(l)
		}
		out.level(l)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, runErr := loadgen.Run(ctx, cfg)
	if len(rep.Levels) > 0 {
		out.summary(rep, levels, *requests)
	}
	if errors.Is(runErr, loadgen.ErrConfig) {
		return usageError{err: runErr} // a flag's value, refused before anything was sent
	}
	if runErr != nil {
		return runErr
	}
	if t := rep.Totals(); t.Failed > 0 {
		return fmt.Errorf("%d of %d measured requests failed (%s)", t.Failed, t.Requests, errorCountsText(t.Errors))
	}
	return nil
}

// badHeaderValue reports a value that cannot be sent in an HTTP header:
// one holding a control character (a CR or LF, typically).
func badHeaderValue(v string) bool {
	return strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// parseLevels parses "1,8,32".
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > loadgen.MaxConcurrency {
			return nil, fmt.Errorf("%q is not a concurrency from 1 to %d", f, loadgen.MaxConcurrency)
		}
		out = append(out, n)
	}
	return out, nil
}

// reportWriter prints a run's results as they arrive: the header with the
// first level, then a line per level, then the summary.
type reportWriter interface {
	level(loadgen.LevelReport)
	summary(rep loadgen.Report, levels []int, requests int)
}

type textReport struct {
	w      io.Writer
	cfg    *loadgen.Config
	header bool
}

func (t *textReport) level(l loadgen.LevelReport) {
	if !t.header {
		t.header = true
		fmt.Fprintf(t.w, "%-5s %6s %5s  %-22s %-16s %-18s %8s %10s %12s\n",
			"conc", "ok", "fail", "ttft p50/p90/p99 ms", "itl p50/p99 ms", "e2e p50/p99 ms", "req/s", "out tok/s", "prompt tok/s")
	}
	fmt.Fprintf(t.w, "%-5d %6d %5d  %-22s %-16s %-18s %8.2f %10.1f %12.1f\n",
		l.Concurrency, l.OK, l.Failed,
		fmt.Sprintf("%.1f/%.1f/%.1f", l.TTFT.P50, l.TTFT.P90, l.TTFT.P99),
		fmt.Sprintf("%.2f/%.2f", l.ITL.P50, l.ITL.P99),
		fmt.Sprintf("%.0f/%.0f", l.E2E.P50, l.E2E.P99),
		l.RequestsPerS, l.OutputTokensPerS, l.PromptTokensPerS)
	if l.Failed > 0 {
		codes := ""
		for _, code := range slices.Sorted(maps.Keys(l.StatusCodes)) {
			codes += fmt.Sprintf(" %d×%d", code, l.StatusCodes[code])
		}
		if codes != "" {
			codes = " (status" + codes + ")"
		}
		fmt.Fprintf(t.w, "      failed: %s%s\n", errorCountsText(l.Errors), codes)
		for _, class := range []string{"http_status", "stream_error", "truncated", "timeout", "transport"} {
			if s, ok := l.ErrorSamples[class]; ok {
				fmt.Fprintf(t.w, "        first %s: %s\n", class, s)
			}
		}
	}
	if l.UsageMissing > 0 {
		fmt.Fprintf(t.w, "      %d streams had no usage chunk: their output counted as chunks, their prompt as 0\n", l.UsageMissing)
	}
}

func (t *textReport) summary(rep loadgen.Report, _ []int, requests int) {
	prompt := fmt.Sprintf("~%d-token generated prompts", t.cfg.PromptTokens)
	if t.cfg.Prompt != "" {
		prompt = "a fixed prompt"
	}
	tot := rep.Totals()
	fmt.Fprintf(t.w, "\n%s %s, model %s: %d requests per level, %s, max_tokens %d\n",
		rep.Endpoint, rep.Target, rep.Model, requests, prompt, rep.MaxTokens)
	fmt.Fprintf(t.w, "peak output %.1f tok/s at concurrency %d; peak %.2f req/s at concurrency %d; %d of %d requests ok\n",
		tot.PeakOutputTokensPerS, tot.PeakOutputConcurrency, tot.PeakRequestsPerS, tot.PeakRequestConcurrency, tot.OK, tot.Requests)
}

type jsonReport struct{ w io.Writer }

func (j *jsonReport) level(l loadgen.LevelReport) {
	j.line(struct {
		Kind string `json:"kind"`
		loadgen.LevelReport
	}{"level", l})
}

func (j *jsonReport) summary(rep loadgen.Report, levels []int, requests int) {
	j.line(struct {
		Kind             string           `json:"kind"`
		Target           string           `json:"target"`
		Model            string           `json:"model"`
		Endpoint         loadgen.Endpoint `json:"endpoint"`
		MaxTokens        int              `json:"max_tokens"`
		Concurrency      []int            `json:"concurrency"`
		RequestsPerLevel int              `json:"requests_per_level"`
		loadgen.Totals
	}{"summary", rep.Target, rep.Model, rep.Endpoint, rep.MaxTokens, levels, requests, rep.Totals()})
}

func (j *jsonReport) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of numbers, strings and maps: cannot fail
	}
	fmt.Fprintln(j.w, string(b))
}

func errorCountsText(e loadgen.ErrorCounts) string {
	var parts []string
	for _, p := range []struct {
		n    int
		name string
	}{{e.HTTPStatus, "http_status"}, {e.StreamError, "stream_error"}, {e.Truncated, "truncated"}, {e.Timeout, "timeout"}, {e.Transport, "transport"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	return strings.Join(parts, ", ")
}

// progressBar draws one self-overwriting line on a terminal.
type progressBar struct {
	w    io.Writer
	last time.Time
}

// newProgressBar returns a bar drawing on w, or nil when w is not a
// terminal: a log file or a pipe should get no carriage-return noise.
func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &progressBar{w: w}
}

func (b *progressBar) update(p loadgen.Progress) {
	if now := time.Now(); now.Sub(b.last) >= 100*time.Millisecond || p.Done == p.Total {
		b.last = now
		const width = 30
		filled := width * p.Done / max(p.Total, 1)
		what := fmt.Sprintf("concurrency %d", p.Concurrency)
		if p.Warmup {
			what = "warmup"
		}
		fmt.Fprintf(b.w, "\r\x1b[K[%s%s] %d/%d %s, %d failed",
			strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.Done, p.Total, what, p.Failed)
	}
}

func (b *progressBar) clear() { fmt.Fprint(b.w, "\r\x1b[K") }
