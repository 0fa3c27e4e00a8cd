package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint selects the API a run loads.
type Endpoint string

// The endpoints a run can load.
const (
	// Completions is POST /v1/completions with a "prompt".
	Completions Endpoint = "completions"
	// Chat is POST /v1/chat/completions with one user message.
	Chat Endpoint = "chat"
)

// Bounds on a run, so that a typo cannot turn a benchmark into a flood
// (or into gigabytes of prompt text per request).
const (
	MaxConcurrency  = 4096
	MaxRequests     = 1_000_000
	MaxPromptTokens = 1_000_000
	// MaxCompletionTokens bounds Config.MaxTokens, and with it what one
	// stream may send before it is cut off (see streamLimits).
	MaxCompletionTokens = 1_000_000
)

// ErrConfig is wrapped by the error Run returns for a Config it refuses
// before sending anything, so that a caller can tell a mistake in how it
// was invoked from a failure of the run.
var ErrConfig = errors.New("invalid load generator configuration")

// maxGapSamples bounds the inter-token gaps kept per level; past it they
// are sampled (see reservoir).
const maxGapSamples = 1 << 20

// Config describes a run: one level per entry of Concurrency, each sending
// Requests requests through that many workers, each worker sending its
// next request as soon as its last one ends (a closed loop).
type Config struct {
	// Target is the server's base URL, like http://127.0.0.1:8080.
	Target string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Model names the model; empty means the first one GET /v1/models
	// lists.
	Model    string
	Endpoint Endpoint
	// Concurrency lists the levels, in the order they run.
	Concurrency []int
	// Requests is the number of measured requests per level.
	Requests int
	// Warmup requests run once before the first level, at its
	// concurrency, and are not measured.
	Warmup int
	// Prompt, when set, is sent as every request's prompt. Otherwise each
	// request gets its own story-like prompt of about PromptTokens tokens.
	Prompt       string
	PromptTokens int
	MaxTokens    int
	Temperature  float64
	// Timeout bounds each request, from sending it to the end of its
	// stream.
	Timeout time.Duration
	// Seed picks the generated prompts; the same seed gives the same ones.
	Seed uint64
	// AllowRemote permits a target outside the loopback network.
	AllowRemote bool

	// Progress, when set, is called after each request ends. Calls never
	// overlap, but they come from the run's worker goroutines, so it must
	// return quickly.
	Progress func(Progress)
	// OnLevel, when set, is called with each level's report as soon as
	// the level ends.
	OnLevel func(LevelReport)
}

// Progress is the state of the level in progress.
type Progress struct {
	Warmup      bool // the warmup, not a measured level
	Concurrency int
	Done        int // requests ended, failed or not
	Failed      int
	Total       int
}

// ErrorCounts counts failed requests by class.
type ErrorCounts struct {
	HTTPStatus  int `json:"http_status"`
	StreamError int `json:"stream_error"`
	Truncated   int `json:"truncated"`
	Timeout     int `json:"timeout"`
	Transport   int `json:"transport"`
}

func (e *ErrorCounts) add(c ErrorClass) {
	switch c {
	case HTTPStatus:
		e.HTTPStatus++
	case StreamError:
		e.StreamError++
	case Truncated:
		e.Truncated++
	case Timeout:
		e.Timeout++
	case Transport:
		e.Transport++
	}
}

func (e *ErrorCounts) plus(o ErrorCounts) {
	e.HTTPStatus += o.HTTPStatus
	e.StreamError += o.StreamError
	e.Truncated += o.Truncated
	e.Timeout += o.Timeout
	e.Transport += o.Transport
}

// LevelReport is what one concurrency level measured. Latencies are over
// successful requests only; throughputs divide successful work by the
// level's wall time, from its first request sent to its last one ended.
type LevelReport struct {
	Concurrency int         `json:"concurrency"`
	Requests    int         `json:"requests"`
	OK          int         `json:"ok"`
	Failed      int         `json:"failed"`
	Errors      ErrorCounts `json:"errors"`
	// StatusCodes counts the non-200 statuses behind HTTPStatus errors.
	StatusCodes map[int]int `json:"status_codes,omitempty"`
	// ErrorSamples holds, per failed class, the message of its first
	// failed request (by request number), to show what went wrong.
	ErrorSamples  map[string]string `json:"error_samples,omitempty"`
	FinishReasons map[string]int    `json:"finish_reasons,omitempty"`
	// UsageMissing counts successful streams without a usage chunk; their
	// output is counted as chunks with content and their prompt as zero.
	UsageMissing int `json:"usage_missing"`

	// TTFT is time to first token: from sending the request to the first
	// chunk with content.
	TTFT Summary `json:"ttft_ms"`
	// ITL is inter-token latency: gaps between successive chunks with
	// content, over all successful requests.
	ITL Summary `json:"itl_ms"`
	// TPOT is time per output token after the first, one value per
	// request: (end-to-end - TTFT) / (completion tokens - 1). Unlike ITL
	// it is right when a server packs several tokens into one chunk.
	TPOT Summary `json:"tpot_ms"`
	// E2E is end-to-end latency: from sending the request to [DONE].
	E2E Summary `json:"e2e_ms"`

	DurationS        float64 `json:"duration_s"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	PromptTokensPerS float64 `json:"prompt_tokens_per_s"`
}

// Report is the result of a run.
type Report struct {
	Target    string        `json:"target"`
	Model     string        `json:"model"`
	Endpoint  Endpoint      `json:"endpoint"`
	MaxTokens int           `json:"max_tokens"`
	Levels    []LevelReport `json:"levels"`
}

// Totals sums a report over its levels.
type Totals struct {
	Levels   int         `json:"levels"`
	Requests int         `json:"requests"`
	OK       int         `json:"ok"`
	Failed   int         `json:"failed"`
	Errors   ErrorCounts `json:"errors"`
	// The best throughputs of any level, and the concurrency that
	// reached them (0 when no level had a successful request).
	PeakOutputTokensPerS   float64 `json:"peak_output_tokens_per_s"`
	PeakOutputConcurrency  int     `json:"peak_output_concurrency"`
	PeakRequestsPerS       float64 `json:"peak_requests_per_s"`
	PeakRequestConcurrency int     `json:"peak_requests_concurrency"`
}

// Totals returns the report summed over its levels.
func (r Report) Totals() Totals {
	t := Totals{Levels: len(r.Levels)}
	for _, l := range r.Levels {
		t.Requests += l.Requests
		t.OK += l.OK
		t.Failed += l.Failed
		t.Errors.plus(l.Errors)
		if l.OutputTokensPerS > t.PeakOutputTokensPerS {
			t.PeakOutputTokensPerS, t.PeakOutputConcurrency = l.OutputTokensPerS, l.Concurrency
		}
		if l.RequestsPerS > t.PeakRequestsPerS {
			t.PeakRequestsPerS, t.PeakRequestConcurrency = l.RequestsPerS, l.Concurrency
		}
	}
	return t
}

// configError is a validate error; it matches ErrConfig.
type configError struct{ error }

func (e configError) Unwrap() error        { return e.error }
func (e configError) Is(target error) bool { return target == ErrConfig }

// validate checks cfg and fills defaults that have only one sensible
// value; the caller's flag defaults cover the rest.
func (cfg *Config) validate() error {
	switch cfg.Endpoint {
	case "":
		cfg.Endpoint = Completions
	case Completions, Chat:
	default:
		return fmt.Errorf("endpoint %q: want %q or %q", cfg.Endpoint, Completions, Chat)
	}
	if len(cfg.Concurrency) == 0 {
		return errors.New("no concurrency levels")
	}
	for _, c := range cfg.Concurrency {
		if c < 1 || c > MaxConcurrency {
			return fmt.Errorf("concurrency %d: want 1 to %d", c, MaxConcurrency)
		}
	}
	if cfg.Requests < 1 || cfg.Requests > MaxRequests {
		return fmt.Errorf("requests %d per level: want 1 to %d", cfg.Requests, MaxRequests)
	}
	if cfg.Warmup < 0 || cfg.Warmup > MaxRequests {
		return fmt.Errorf("warmup %d: want 0 to %d", cfg.Warmup, MaxRequests)
	}
	if cfg.Prompt == "" && (cfg.PromptTokens < 1 || cfg.PromptTokens > MaxPromptTokens) {
		return fmt.Errorf("prompt tokens %d: want 1 to %d (or a fixed prompt)", cfg.PromptTokens, MaxPromptTokens)
	}
	if cfg.MaxTokens < 1 || cfg.MaxTokens > MaxCompletionTokens {
		return fmt.Errorf("max tokens %d: want 1 to %d", cfg.MaxTokens, MaxCompletionTokens)
	}
	if cfg.Temperature < 0 || math.IsNaN(cfg.Temperature) || math.IsInf(cfg.Temperature, 0) {
		// NaN and infinities have no JSON form: the request body could
		// not even be written.
		return fmt.Errorf("temperature %g: want a finite number, 0 or more", cfg.Temperature)
	}
	if cfg.Timeout <= 0 {
		return fmt.Errorf("timeout %v: every request needs a positive deadline", cfg.Timeout)
	}
	return nil
}

// Run runs every level of cfg in turn and returns their reports. Failed
// requests are part of the report, not an error; Run fails for a bad
// config (wrapping ErrConfig), a refused target, a model it cannot
// discover, a warmup in which every request failed, or ctx ending, in
// which case the report holds the levels that completed.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, configError{err}
	}
	base, err := CheckTarget(cfg.Target, cfg.AllowRemote)
	if err != nil {
		return Report{}, err
	}
	maxConc := 0
	for _, c := range cfg.Concurrency {
		maxConc = max(maxConc, c)
	}
	client := NewClient(cfg.AllowRemote, maxConc)
	defer client.CloseIdleConnections()

	rep := Report{Target: base.String(), Model: cfg.Model, Endpoint: cfg.Endpoint, MaxTokens: cfg.MaxTokens}
	if rep.Model == "" {
		mctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		rep.Model, err = DiscoverModel(mctx, client, base, cfg.APIKey)
		cancel()
		if err != nil {
			return rep, err
		}
	}
	path := []string{"v1", "completions"}
	if cfg.Endpoint == Chat {
		path = []string{"v1", "chat", "completions"}
	}
	l := &level{cfg: &cfg, client: client, url: base.JoinPath(path...).String(), model: rep.Model}

	next := uint64(0) // prompt index: no two requests of a run share one
	if cfg.Warmup > 0 {
		w := l.run(ctx, min(cfg.Warmup, cfg.Concurrency[0]), cfg.Warmup, next, true)
		next += uint64(cfg.Warmup)
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("interrupted during warmup: %w", err)
		}
		if w.OK == 0 {
			return rep, fmt.Errorf("warmup: all %d requests failed; the first: %s", w.Requests, firstSample(w))
		}
	}
	for _, c := range cfg.Concurrency {
		lr := l.run(ctx, c, cfg.Requests, next, false)
		next += uint64(cfg.Requests)
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("interrupted at concurrency %d: %w", c, err)
		}
		rep.Levels = append(rep.Levels, lr)
		if cfg.OnLevel != nil {
			cfg.OnLevel(lr)
		}
	}
	return rep, nil
}

func firstSample(l LevelReport) string {
	for _, c := range classNames[1:] {
		if s, ok := l.ErrorSamples[c]; ok {
			return c + ": " + s
		}
	}
	return "(no message)"
}

// level holds what every level of a run shares.
type level struct {
	cfg    *Config
	client *http.Client
	url    string
	model  string
}

// body returns the JSON request for prompt number index.
func (l *level) body(index uint64) []byte {
	prompt := l.cfg.Prompt
	if prompt == "" {
		prompt = Prompt(l.cfg.Seed, index, wordsForTokens(l.cfg.PromptTokens))
	}
	req := map[string]any{
		"model":          l.model,
		"max_tokens":     l.cfg.MaxTokens,
		"temperature":    l.cfg.Temperature,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if l.cfg.Endpoint == Chat {
		req["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		req["prompt"] = prompt
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err) // only strings and numbers: cannot fail
	}
	return b
}

// run sends n requests through conc workers and summarises them.
// Request i uses prompt number first+i.
func (l *level) run(ctx context.Context, conc, n int, first uint64, warmup bool) LevelReport {
	results := make([]result, n)
	gaps := newReservoir(maxGapSamples, l.cfg.Seed^first)
	var gapSum float64
	var (
		next         atomic.Int64
		mu           sync.Mutex
		done, failed int
		wg           sync.WaitGroup
	)
	start := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				body := l.body(first + uint64(i))
				rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
				r := do(rctx, l.client, l.url, l.cfg.APIKey, body, limitsFor(l.cfg.MaxTokens))
				cancel()
				mu.Lock()
				if r.class == OK {
					for _, g := range r.gaps {
						gaps.add(ms(g))
						gapSum += ms(g)
					}
				} else {
					failed++
				}
				r.gaps = nil
				results[i] = r
				done++
				if l.cfg.Progress != nil {
					l.cfg.Progress(Progress{Warmup: warmup, Concurrency: conc, Done: done, Failed: failed, Total: n})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	lr := summarize(results, time.Since(start))
	lr.Concurrency = conc
	lr.ITL = Summarize(gaps.xs)
	if gaps.seen > 0 {
		lr.ITL.N, lr.ITL.Mean = gaps.seen, gapSum/float64(gaps.seen)
	}
	return lr
}

// summarize turns a level's results into its report, all but ITL and
// Concurrency.
func summarize(results []result, elapsed time.Duration) LevelReport {
	lr := LevelReport{Requests: len(results), DurationS: elapsed.Seconds()}
	var ttft, e2e, tpot []float64
	for _, r := range results {
		if r.class != OK {
			lr.Failed++
			lr.Errors.add(r.class)
			if r.class == HTTPStatus {
				if lr.StatusCodes == nil {
					lr.StatusCodes = map[int]int{}
				}
				lr.StatusCodes[r.status]++
			}
			if lr.ErrorSamples == nil {
				lr.ErrorSamples = map[string]string{}
			}
			if _, ok := lr.ErrorSamples[r.class.String()]; !ok {
				lr.ErrorSamples[r.class.String()] = r.msg
			}
			continue
		}
		lr.OK++
		if lr.FinishReasons == nil {
			lr.FinishReasons = map[string]int{}
		}
		lr.FinishReasons[r.finish]++
		out := r.completionTokens
		if !r.usage {
			lr.UsageMissing++
			out = r.chunks
		}
		lr.CompletionTokens += out
		lr.PromptTokens += r.promptTokens
		e2e = append(e2e, ms(r.e2e))
		if r.chunks > 0 {
			ttft = append(ttft, ms(r.ttft))
			if out > 1 {
				tpot = append(tpot, ms(r.e2e-r.ttft)/float64(out-1))
			}
		}
	}
	lr.TTFT, lr.E2E, lr.TPOT = Summarize(ttft), Summarize(e2e), Summarize(tpot)
	if s := elapsed.Seconds(); s > 0 {
		lr.RequestsPerS = float64(lr.OK) / s
		lr.OutputTokensPerS = float64(lr.CompletionTokens) / s
		lr.PromptTokensPerS = float64(lr.PromptTokens) / s
	}
	return lr
}
