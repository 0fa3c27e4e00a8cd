package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvDir names the environment variable that overrides where llamacpp.mjs
// and its node_modules live (default: <repo root>/tools/node).
const EnvDir = "BULKHEAD_NODE_PEER_DIR"

// scriptName is the CLI this package drives, inside the peer directory.
const scriptName = "llamacpp.mjs"

// stderrTailBytes bounds how much of node's stderr an error carries: enough
// for llama.cpp's last few log lines and the script's final message.
const stderrTailBytes = 2048

// Result is one greedy completion as llama.cpp produced it.
type Result struct {
	// Completion is the text of the generated tokens only, not the prompt.
	Completion string
	// PromptTokens is the prompt as llama.cpp tokenized it, BOS included
	// when the vocabulary asks for one.
	PromptTokens []int
	// Tokens are the generated token ids, without the EOS or BOS that ended
	// generation early.
	Tokens []int
}

// BenchResult is llama.cpp's throughput on one model and thread count.
type BenchResult struct {
	// PrefillTokensPerS and DecodeTokensPerS are the best over the reps:
	// prompt tokens evaluated per second in one batch, and tokens generated
	// per second one at a time by a single sequence.
	PrefillTokensPerS, DecodeTokensPerS float64
	// PrefillTokensPerSMedian and DecodeTokensPerSMedian are the medians over
	// the reps, to show how noisy the best is.
	PrefillTokensPerSMedian, DecodeTokensPerSMedian float64
	// Threads is the thread count llama.cpp was asked to use.
	Threads int
	// Version names the llama.cpp build and the node-llama-cpp release.
	Version string
}

// RepoRoot finds the directory holding go.mod by walking up from the working
// directory (tests run in their package directories).
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("peer: finding the repo root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("peer: no go.mod in %s or any directory above it", wd)
		}
	}
}

// Dir returns the directory holding llamacpp.mjs and its node_modules:
// $BULKHEAD_NODE_PEER_DIR when set, else <repo root>/tools/node.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "tools", "node"), nil
}

// Available reports whether node and the node-llama-cpp install are present;
// the error says what is missing. It only looks at files and PATH, so it is
// cheap enough to call before every test that needs the peer.
func Available() error {
	_, err := locate()
	return err
}

// install is what a run needs: the node binary and the script.
type install struct {
	node, script string
}

func locate() (install, error) {
	dir, err := Dir()
	if err != nil {
		return install{}, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return install{}, fmt.Errorf("peer: node is not on PATH (%w); llama.cpp runs under node-llama-cpp", err)
	}
	script := filepath.Join(dir, scriptName)
	if _, err := os.Stat(script); err != nil {
		return install{}, fmt.Errorf("peer: %s is missing (set %s to the directory holding it): %w", script, EnvDir, err)
	}
	pkg := filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")
	if _, err := os.Stat(pkg); err != nil {
		return install{}, fmt.Errorf("peer: node-llama-cpp is not installed in %s (run `npm install --omit=optional` there): %w", dir, err)
	}
	// The prebuilt llama.cpp comes from a per-platform package; without it
	// node-llama-cpp would try to download or compile, which we forbid.
	addons, _ := filepath.Glob(filepath.Join(dir, "node_modules", "@node-llama-cpp", "*", "bins", "*", "llama-addon.node"))
	if len(addons) == 0 {
		return install{}, fmt.Errorf("peer: no prebuilt llama.cpp binary under %s (the @node-llama-cpp/<platform> package, e.g. linux-x64, is not installed)",
			filepath.Join(dir, "node_modules", "@node-llama-cpp"))
	}
	return install{node: node, script: script}, nil
}

// Generate runs `llamacpp.mjs generate`: a greedy completion of prompt of at
// most maxTokens tokens, stopping early at EOS or BOS. threads <= 0 means 1.
func Generate(ctx context.Context, model, prompt string, maxTokens, threads int) (Result, error) {
	if maxTokens < 0 {
		return Result{}, fmt.Errorf("peer generate: maxTokens is %d, want >= 0", maxTokens)
	}
	threads = max(threads, 1)
	var out struct {
		Completion   *string `json:"completion"`
		PromptTokens []int   `json:"prompt_tokens"`
		Tokens       []int   `json:"tokens"`
	}
	err := run(ctx, &out, "generate", "--model", model, "--prompt", prompt,
		"--max-tokens", strconv.Itoa(maxTokens), "--threads", strconv.Itoa(threads))
	if err != nil {
		return Result{}, err
	}
	if out.Completion == nil || out.PromptTokens == nil || out.Tokens == nil {
		return Result{}, errors.New("peer generate: llamacpp.mjs output lacks completion, prompt_tokens or tokens")
	}
	return Result{Completion: *out.Completion, PromptTokens: out.PromptTokens, Tokens: out.Tokens}, nil
}

// GenerateAll is Generate for each of prompts, in order, with the model
// loaded once: one node process instead of one per prompt.
func GenerateAll(ctx context.Context, model string, prompts []string, maxTokens, threads int) ([]Result, error) {
	if maxTokens < 0 || len(prompts) == 0 {
		return nil, fmt.Errorf("peer generate: %d prompts, maxTokens %d; want at least one prompt and maxTokens >= 0", len(prompts), maxTokens)
	}
	js, err := json.Marshal(prompts)
	if err != nil {
		return nil, fmt.Errorf("peer generate: %w", err)
	}
	var out []struct {
		Completion   *string `json:"completion"`
		PromptTokens []int   `json:"prompt_tokens"`
		Tokens       []int   `json:"tokens"`
	}
	err = run(ctx, &out, "generate", "--model", model, "--prompts-json", string(js),
		"--max-tokens", strconv.Itoa(maxTokens), "--threads", strconv.Itoa(max(threads, 1)))
	if err != nil {
		return nil, err
	}
	if len(out) != len(prompts) {
		return nil, fmt.Errorf("peer generate: %d results for %d prompts", len(out), len(prompts))
	}
	res := make([]Result, len(out))
	for i, o := range out {
		if o.Completion == nil || o.PromptTokens == nil || o.Tokens == nil {
			return nil, fmt.Errorf("peer generate: result %d lacks completion, prompt_tokens or tokens", i)
		}
		res[i] = Result{Completion: *o.Completion, PromptTokens: o.PromptTokens, Tokens: o.Tokens}
	}
	return res, nil
}

// Bench runs `llamacpp.mjs bench`: prefill speed over a promptTokens-token
// prompt in one batch, and single-stream decode speed over genTokens tokens,
// each on a fresh context, best and median of reps after one untimed
// warm-up round.
func Bench(ctx context.Context, model string, threads, promptTokens, genTokens, reps int) (BenchResult, error) {
	if threads < 1 || promptTokens < 1 || genTokens < 1 || reps < 1 {
		return BenchResult{}, fmt.Errorf("peer bench: threads %d, promptTokens %d, genTokens %d, reps %d; all must be >= 1",
			threads, promptTokens, genTokens, reps)
	}
	var out struct {
		Prefill       *float64 `json:"prefill_tokens_per_s"`
		Decode        *float64 `json:"decode_tokens_per_s"`
		PrefillMedian float64  `json:"prefill_tokens_per_s_median"`
		DecodeMedian  float64  `json:"decode_tokens_per_s_median"`
		Threads       int      `json:"threads"`
		Version       string   `json:"llama_cpp"`
	}
	err := run(ctx, &out, "bench", "--model", model, "--threads", strconv.Itoa(threads),
		"--prompt-tokens", strconv.Itoa(promptTokens), "--gen-tokens", strconv.Itoa(genTokens), "--reps", strconv.Itoa(reps))
	if err != nil {
		return BenchResult{}, err
	}
	if out.Prefill == nil || out.Decode == nil {
		return BenchResult{}, errors.New("peer bench: llamacpp.mjs output lacks prefill_tokens_per_s or decode_tokens_per_s")
	}
	return BenchResult{
		PrefillTokensPerS:       *out.Prefill,
		DecodeTokensPerS:        *out.Decode,
		PrefillTokensPerSMedian: out.PrefillMedian,
		DecodeTokensPerSMedian:  out.DecodeMedian,
		Threads:                 out.Threads,
		Version:                 out.Version,
	}, nil
}

// Tokenize runs `llamacpp.mjs tokenize`: text as llama.cpp tokenizes a
// prompt, with BOS first when the vocabulary asks for one.
func Tokenize(ctx context.Context, model, text string) ([]int, error) {
	var ids []int
	if err := run(ctx, &ids, "tokenize", "--model", model, "--text", text); err != nil {
		return nil, err
	}
	if ids == nil {
		return nil, errors.New("peer tokenize: llamacpp.mjs printed null, want a list of token ids")
	}
	return ids, nil
}

// run executes one llamacpp.mjs command and decodes its stdout into out.
func run(ctx context.Context, out any, command string, args ...string) error {
	in, err := locate()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, in.node, append([]string{in.script, command}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// If llama.cpp leaves a grandchild holding the pipes, stop waiting for
	// them shortly after the process itself is gone.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("peer %s: stopped: %w (stderr: %s)", command, ctx.Err(), stderrTail(stderr.Bytes()))
		}
		return fmt.Errorf("peer %s: %s %s failed: %w; stderr: %s", command, in.node, scriptName, err, stderrTail(stderr.Bytes()))
	}
	// The script prints exactly one JSON document; anything else is a fault.
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("peer %s: decoding llamacpp.mjs output %q: %w", command, clip(stdout.String(), 200), err)
	}
	return nil
}

// stderrTail returns the last stderrTailBytes of b, starting at a line
// boundary when one is near, with surrounding whitespace trimmed.
func stderrTail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty)"
	}
	if len(s) <= stderrTailBytes {
		return s
	}
	s = s[len(s)-stderrTailBytes:]
	// Drop a partial first line, unless that would drop most of the tail.
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < 200 {
		s = s[i+1:]
	}
	return "..." + s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
