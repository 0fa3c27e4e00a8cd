package loadgen

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func baseConfig(target string) Config {
	return Config{
		Target:       target,
		Concurrency:  []int{1},
		Requests:     4,
		PromptTokens: 40,
		MaxTokens:    16,
		Timeout:      5 * time.Second,
		Seed:         7,
	}
}

// checkSummary fails unless s is an ordered summary of n samples.
func checkSummary(t *testing.T, name string, s Summary, n int) {
	t.Helper()
	if s.N != n {
		t.Errorf("%s: %d samples, want %d", name, s.N, n)
	}
	if !(s.Min <= s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.Max) || s.Min < 0 {
		t.Errorf("%s: percentiles out of order: %+v", name, s)
	}
	if s.Mean < s.Min || s.Mean > s.Max {
		t.Errorf("%s: mean %.3f outside [%.3f, %.3f]", name, s.Mean, s.Min, s.Max)
	}
}

func TestRunMeasuresAHealthyServer(t *testing.T) {
	const chunks, first, gap = 5, 6 * time.Millisecond, 2 * time.Millisecond
	f := &fakeServer{chunks: chunks, firstDelay: first, gap: gap, apiKey: "sk-test"}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL + "/v1/") // a trailing /v1 must not double up
	cfg.APIKey = "sk-test"
	cfg.Concurrency = []int{1, 3}
	cfg.Requests = 9
	cfg.Warmup = 2
	var levels []LevelReport
	cfg.OnLevel = func(l LevelReport) { levels = append(levels, l) }
	progress := 0
	cfg.Progress = func(p Progress) {
		progress++
		if p.Done > p.Total || p.Failed > p.Done {
			t.Errorf("progress %+v is impossible", p)
		}
	}

	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Model != "fake-model" {
		t.Errorf("model %q, want the first one listed, fake-model", rep.Model)
	}
	if len(rep.Levels) != 2 || len(levels) != 2 {
		t.Fatalf("%d levels reported, %d via OnLevel; want 2", len(rep.Levels), len(levels))
	}
	if progress != 2+9+9 {
		t.Errorf("Progress called %d times, want once per request (20)", progress)
	}
	for i, l := range rep.Levels {
		if l.Concurrency != cfg.Concurrency[i] || l.Requests != 9 || l.OK != 9 || l.Failed != 0 {
			t.Fatalf("level %d: %+v; want 9 of 9 ok at concurrency %d", i, l, cfg.Concurrency[i])
		}
		if l.CompletionTokens != 9*chunks || l.UsageMissing != 0 {
			t.Errorf("level %d: %d completion tokens (%d without usage), want %d from usage", i, l.CompletionTokens, l.UsageMissing, 9*chunks)
		}
		if l.PromptTokens < 9*30 {
			t.Errorf("level %d: %d prompt tokens for 9 prompts of ~30 words", i, l.PromptTokens)
		}
		if l.FinishReasons["length"] != 9 {
			t.Errorf("level %d: finish reasons %v", i, l.FinishReasons)
		}
		checkSummary(t, "ttft", l.TTFT, 9)
		checkSummary(t, "itl", l.ITL, 9*(chunks-1))
		checkSummary(t, "e2e", l.E2E, 9)
		checkSummary(t, "tpot", l.TPOT, 9)
		// The client cannot see a chunk before the server sends it.
		if l.TTFT.Min < ms(first) {
			t.Errorf("level %d: TTFT min %.2f ms, but the server waits %v before the first token", i, l.TTFT.Min, first)
		}
		if floor := ms(first + (chunks-1)*gap); l.E2E.Min < floor {
			t.Errorf("level %d: e2e min %.2f ms, below the %.2f ms the server takes", i, l.E2E.Min, floor)
		}
		if l.E2E.P50 < l.TTFT.P50 {
			t.Errorf("level %d: e2e p50 %.2f below TTFT p50 %.2f", i, l.E2E.P50, l.TTFT.P50)
		}
		// Gaps are 2 ms on the server; a client that timestamps reads
		// rather than events would see many near zero.
		if l.ITL.Mean < 1 {
			t.Errorf("level %d: mean inter-token gap %.3f ms, server spaces tokens %v apart", i, l.ITL.Mean, gap)
		}
		wantRPS := 9 / l.DurationS
		if math.Abs(l.RequestsPerS-wantRPS) > 1e-9*wantRPS || math.Abs(l.OutputTokensPerS-chunks*wantRPS) > 1e-6*wantRPS {
			t.Errorf("level %d: %.3f req/s and %.3f tok/s over %.3f s", i, l.RequestsPerS, l.OutputTokensPerS, l.DurationS)
		}
	}
	tot := rep.Totals()
	if tot.Requests != 18 || tot.OK != 18 || tot.Failed != 0 || tot.PeakOutputConcurrency == 0 {
		t.Errorf("totals %+v", tot)
	}

	prompts := f.prompts()
	if len(prompts) != 20 {
		t.Fatalf("server saw %d requests, want 2 warmup + 18", len(prompts))
	}
	seen := map[string]bool{}
	for _, p := range prompts {
		if seen[p] {
			t.Errorf("prompt sent twice: %q", p)
		}
		seen[p] = true
	}
	b := f.bodies[0]
	so, _ := b["stream_options"].(map[string]any)
	if b["stream"] != true || so["include_usage"] != true || b["model"] != "fake-model" ||
		b["max_tokens"] != float64(16) || b["temperature"] != float64(0) {
		t.Errorf("request body %v", b)
	}
}

func TestChatEndpointIgnoresRoleOnlyChunk(t *testing.T) {
	const first = 8 * time.Millisecond
	f := &fakeServer{chunks: 3, firstDelay: first, gap: time.Millisecond, noUsage: true}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.Endpoint = Chat
	cfg.Model = "m"
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Levels[0]
	if l.OK != 4 {
		t.Fatalf("%d of 4 ok: %v", l.OK, l.ErrorSamples)
	}
	if l.TTFT.Min < ms(first) {
		t.Errorf("TTFT min %.2f ms: the role-only chunk stopped the clock (first token after %v)", l.TTFT.Min, first)
	}
	if l.UsageMissing != 4 || l.CompletionTokens != 4*3 || l.PromptTokens != 0 {
		t.Errorf("without usage: %d missing, %d completion tokens (want 12 counted chunks), %d prompt", l.UsageMissing, l.CompletionTokens, l.PromptTokens)
	}
	if f.paths[0] != "/v1/chat/completions" || promptOf(f.bodies[0]) == "" || f.bodies[0]["model"] != "m" {
		t.Errorf("chat request went to %s with %v", f.paths[0], f.bodies[0])
	}
}

func TestConcurrencyIsHonoured(t *testing.T) {
	f := &fakeServer{chunks: 2, barrier: 4}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.Model = "m"
	cfg.Concurrency = []int{4}
	cfg.Requests = 8
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if f.maxInflight != 4 {
		t.Errorf("at most %d requests in flight at concurrency 4", f.maxInflight)
	}

	f2 := &fakeServer{chunks: 2, gap: time.Millisecond}
	srv2 := startFake(t, f2)
	cfg.Target, cfg.Concurrency = srv2.URL, []int{2}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if f2.maxInflight > 2 {
		t.Errorf("%d requests in flight at concurrency 2", f2.maxInflight)
	}
}

func TestErrorClasses(t *testing.T) {
	plan := []behaviour{bOK, b500, bErrData, bErrEvent, bDrop, bNoFinish, bNoDone, bAbort}
	f := &fakeServer{chunks: 4, plan: func(n int) behaviour { return plan[n%len(plan)] }}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.Model = "m"
	cfg.Concurrency = []int{3}
	cfg.Requests = 2 * len(plan)
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Levels[0]
	want := ErrorCounts{HTTPStatus: 2, StreamError: 6, Truncated: 6}
	if l.OK != 2 || l.Failed != 14 || l.Errors != want {
		t.Fatalf("ok %d failed %d errors %+v; want 2, 14, %+v (samples %v)", l.OK, l.Failed, l.Errors, want, l.ErrorSamples)
	}
	if l.StatusCodes[500] != 2 || len(l.StatusCodes) != 1 {
		t.Errorf("status codes %v, want 500 twice", l.StatusCodes)
	}
	if s := l.ErrorSamples["http_status"]; !strings.Contains(s, "500") || !strings.Contains(s, "the engine fell over") {
		t.Errorf("http error sample %q should carry the status and the server's message", s)
	}
	if l.TTFT.N != 2 || l.E2E.N != 2 {
		t.Errorf("latencies over %d/%d requests; failed ones must not count", l.TTFT.N, l.E2E.N)
	}
	tot := rep.Totals()
	if tot.Errors != want || tot.Failed != 14 {
		t.Errorf("totals %+v", tot)
	}
}

func TestTimeouts(t *testing.T) {
	f := &fakeServer{chunks: 3, plan: func(n int) behaviour { return []behaviour{bHangHeader, bHangStream}[n%2] }}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.Model = "m"
	cfg.Concurrency = []int{2}
	cfg.Requests = 2
	cfg.Timeout = 150 * time.Millisecond
	start := time.Now()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Levels[0]; l.Errors.Timeout != 2 {
		t.Errorf("errors %+v, want 2 timeouts (samples %v)", l.Errors, l.ErrorSamples)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("run took %v with a 150ms request timeout", d)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestTransportErrorsAndWarmup(t *testing.T) {
	cfg := baseConfig(closedPort(t))
	cfg.Model = "m"
	cfg.Requests = 2
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Levels[0]; l.Errors.Transport != 2 || l.OK != 0 {
		t.Errorf("errors %+v against a closed port, want 2 transport", l.Errors)
	}

	cfg.Warmup = 2
	_, err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "warmup: all 2 requests failed") || !strings.Contains(err.Error(), "transport") {
		t.Errorf("a warmup that cannot reach the server should stop the run, got %v", err)
	}
}

func TestModelDiscoveryFailure(t *testing.T) {
	f := &fakeServer{apiKey: "right"}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.APIKey = "wrong"
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("model discovery with a bad key: %v, want the 401", err)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1/v1/completions", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	cfg := baseConfig(srv.URL)
	cfg.Model = "m"
	cfg.Requests = 1
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Levels[0]; l.StatusCodes[307] != 1 {
		t.Errorf("a redirect should count as an http_status failure: %+v", l)
	}
}

func TestRefusesRemoteTargets(t *testing.T) {
	for _, target := range []string{"http://192.0.2.1:8080", "http://example.com", "http://0.0.0.0:80", "http://[2001:db8::1]:80", "http://10.0.0.1"} {
		cfg := baseConfig(target)
		_, err := Run(context.Background(), cfg)
		if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("Run(%s): %v, want ErrNotLoopback", target, err)
		}
	}
	for _, target := range []string{"http://127.0.0.1:8080", "http://127.9.9.9", "http://[::1]:80", "http://localhost:1", "https://LOCALHOST./x/v1/"} {
		if _, err := CheckTarget(target, false); err != nil {
			t.Errorf("CheckTarget(%s): %v", target, err)
		}
	}
	if u, _ := CheckTarget("http://localhost:1/api/v1/", false); u.String() != "http://localhost:1/api" {
		t.Errorf("normalised to %s", u)
	}
	for _, target := range []string{"ftp://127.0.0.1", "127.0.0.1:8080", "http://", "http://u:p@127.0.0.1", "http://127.0.0.1?x=1"} {
		if _, err := CheckTarget(target, true); err == nil {
			t.Errorf("CheckTarget(%s) accepted", target)
		}
	}
	if _, err := CheckTarget("http://192.0.2.1", true); err != nil {
		t.Errorf("allowRemote: %v", err)
	}
	// A password in the URL is refused without being repeated, also when
	// the URL does not even parse.
	for _, target := range []string{"http://user:hunter2@127.0.0.1:8080", "http://user:hunter2@127.0.0.1:bad", "http://user:hunter2@127.0.0.1:80/%zz", "ftp://user:hunter2@127.0.0.1", "http://user:hunter2@"} {
		if _, err := CheckTarget(target, true); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("a target with a password: %v", err)
		}
	}
}

// The dialer is the second line of defence: a name or redirect that leads
// off loopback is refused before any packet leaves.
func TestDialerRefusesNonLoopback(t *testing.T) {
	c := NewClient(false, 1)
	_, err := c.Get("http://192.0.2.1:9/")
	if !errors.Is(err, ErrNotLoopback) {
		t.Errorf("dial to 192.0.2.1: %v, want ErrNotLoopback", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no levels":     func(c *Config) { c.Concurrency = nil },
		"zero conc":     func(c *Config) { c.Concurrency = []int{1, 0} },
		"huge conc":     func(c *Config) { c.Concurrency = []int{MaxConcurrency + 1} },
		"no requests":   func(c *Config) { c.Requests = 0 },
		"too many":      func(c *Config) { c.Requests = MaxRequests + 1 },
		"no timeout":    func(c *Config) { c.Timeout = 0 },
		"no max tokens": func(c *Config) { c.MaxTokens = 0 },
		"bad endpoint":  func(c *Config) { c.Endpoint = "embeddings" },
		"no prompt":     func(c *Config) { c.PromptTokens = 0 },
		"neg temp":      func(c *Config) { c.Temperature = -1 },
		"neg warmup":    func(c *Config) { c.Warmup = -1 },
		// Not representable in the JSON body: the workers would panic.
		"NaN temp": func(c *Config) { c.Temperature = math.NaN() },
		"inf temp": func(c *Config) { c.Temperature = math.Inf(1) },
		// A typo that would build gigabytes of prompt per request.
		"huge prompt": func(c *Config) { c.PromptTokens = MaxPromptTokens + 1 },
	} {
		cfg := baseConfig("http://127.0.0.1:1")
		cfg.Model = "m" // so that a config accepted by mistake reaches the load loop, not model discovery
		mut(&cfg)
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Run gave %v, want an error wrapping ErrConfig", name, err)
		}
	}
	// The fixed prompt makes PromptTokens irrelevant, and a valid config
	// against a closed port is failed requests, not a config error.
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Model, cfg.Requests, cfg.Prompt, cfg.PromptTokens = "m", 1, "hi", MaxPromptTokens+1
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Errorf("a valid config: %v", err)
	}
}

func TestCancelStopsTheRun(t *testing.T) {
	f := &fakeServer{chunks: 2, plan: func(int) behaviour { return bHangStream }}
	srv := startFake(t, f)
	cfg := baseConfig(srv.URL)
	cfg.Model = "m"
	cfg.Concurrency = []int{2, 4}
	cfg.Requests = 100
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) || len(rep.Levels) != 0 {
		t.Errorf("cancelled run: %v with %d levels", err, len(rep.Levels))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v to stop the run", d)
	}
}
