package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// EnvTestGGUF names a GGUF of stories260K that the llama.cpp-backed tests
// run against; they skip when it is unset, so the default run needs neither
// a model file nor node-llama-cpp.
const envTestGGUF = "BULKHEAD_PEER_TEST_GGUF"

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "module github.com/bulkhead-llm/bulkhead") {
		t.Fatalf("RepoRoot() = %s, whose go.mod is not Bulkhead's", root)
	}
}

func TestAvailableNamesWhatIsMissing(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not on PATH")
	}
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	if err := Available(); err == nil || !strings.Contains(err.Error(), "llamacpp.mjs is missing") {
		t.Fatalf("Available() with an empty dir = %v, want an error about llamacpp.mjs", err)
	}
	writeFile(t, filepath.Join(dir, scriptName), "")
	if err := Available(); err == nil || !strings.Contains(err.Error(), "node-llama-cpp is not installed") {
		t.Fatalf("Available() without node_modules = %v, want an error about node-llama-cpp", err)
	}
	writeFile(t, filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json"), "{}")
	if err := Available(); err == nil || !strings.Contains(err.Error(), "no prebuilt llama.cpp binary") {
		t.Fatalf("Available() without a prebuilt binary = %v, want an error about the binary", err)
	}
	writeFile(t, filepath.Join(dir, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64", "llama-addon.node"), "")
	if err := Available(); err != nil {
		t.Fatalf("Available() with everything in place = %v", err)
	}
}

// fakeScript stands in for llamacpp.mjs so the Go side (arguments, JSON
// decoding, error reporting) is tested without llama.cpp or a model. The
// model argument picks the behaviour.
const fakeScript = `
const args = process.argv.slice(2);
const model = args[args.indexOf("--model") + 1];
if (model === "fail") {
    for (let i = 0; i < 500; i++) process.stderr.write("llama.cpp info: noise line " + i + "\n");
    process.stderr.write("llamacpp.mjs: the real reason\n");
    process.exit(1);
}
if (model === "garbage") { process.stdout.write("not json\n"); process.exit(0); }
if (model === "hang") { setTimeout(() => {}, 60000); }
else if (args[0] === "generate" && args.includes("--prompts-json")) {
    const prompts = JSON.parse(args[args.indexOf("--prompts-json") + 1]);
    const n = model === "short" ? prompts.length - 1 : prompts.length;
    process.stdout.write(JSON.stringify(prompts.slice(0, n).map((p, i) => ({completion: "echo:" + p, prompt_tokens: [1], tokens: [i]}))) + "\n");
}
else if (args[0] === "generate")
    process.stdout.write(JSON.stringify({completion: "echo:" + args.join(" "), prompt_tokens: [1, 2], tokens: [3]}) + "\n");
else if (args[0] === "bench")
    process.stdout.write(JSON.stringify({prefill_tokens_per_s: 100.5, decode_tokens_per_s: 10.25,
        prefill_tokens_per_s_median: 90, decode_tokens_per_s_median: 9, threads: 2, llama_cpp: "fake"}) + "\n");
else if (args[0] === "tokenize")
    process.stdout.write(JSON.stringify([1, 42]) + "\n");
`

func fakePeer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not on PATH")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, scriptName), fakeScript)
	writeFile(t, filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json"), "{}")
	writeFile(t, filepath.Join(dir, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64", "llama-addon.node"), "")
	t.Setenv(EnvDir, dir)
}

func TestCommandsAgainstFakeScript(t *testing.T) {
	fakePeer(t)
	ctx := context.Background()

	res, err := Generate(ctx, "m.gguf", "a prompt", 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Completion: "echo:generate --model m.gguf --prompt a prompt --max-tokens 7 --threads 1", PromptTokens: []int{1, 2}, Tokens: []int{3}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Generate = %+v, want %+v", res, want)
	}

	all, err := GenerateAll(ctx, "m.gguf", []string{"one", `two "quoted"`}, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantAll := []Result{{Completion: "echo:one", PromptTokens: []int{1}, Tokens: []int{0}}, {Completion: `echo:two "quoted"`, PromptTokens: []int{1}, Tokens: []int{1}}}
	if !reflect.DeepEqual(all, wantAll) {
		t.Fatalf("GenerateAll = %+v, want %+v", all, wantAll)
	}
	if _, err := GenerateAll(ctx, "short", []string{"a", "b"}, 7, 1); err == nil || !strings.Contains(err.Error(), "1 results for 2 prompts") {
		t.Fatalf("GenerateAll with a missing result = %v, want an error counting them", err)
	}

	b, err := Bench(ctx, "m.gguf", 2, 16, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantB := BenchResult{PrefillTokensPerS: 100.5, DecodeTokensPerS: 10.25, PrefillTokensPerSMedian: 90, DecodeTokensPerSMedian: 9, Threads: 2, Version: "fake"}
	if b != wantB {
		t.Fatalf("Bench = %+v, want %+v", b, wantB)
	}

	ids, err := Tokenize(ctx, "m.gguf", "x")
	if err != nil || !reflect.DeepEqual(ids, []int{1, 42}) {
		t.Fatalf("Tokenize = %v, %v; want [1 42]", ids, err)
	}
}

func TestErrorsCarryStderrTail(t *testing.T) {
	fakePeer(t)
	_, err := Generate(context.Background(), "fail", "p", 1, 1)
	if err == nil {
		t.Fatal("Generate succeeded against a failing script")
	}
	msg := err.Error()
	if !strings.Contains(msg, "llamacpp.mjs: the real reason") || !strings.Contains(msg, "exit status 1") {
		t.Fatalf("error %q lacks the script's last stderr line or the exit status", msg)
	}
	if strings.Contains(msg, "noise line 0\n") || len(msg) > stderrTailBytes+300 {
		t.Fatalf("error is %d bytes; want only the stderr tail", len(msg))
	}

	if _, err := Tokenize(context.Background(), "garbage", "x"); err == nil || !strings.Contains(err.Error(), `"not json\n"`) {
		t.Fatalf("Tokenize on non-JSON output = %v, want a decode error quoting the output", err)
	}
}

func TestContextCancelStopsNode(t *testing.T) {
	fakePeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Generate(ctx, "hang", "p", 1, 1)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("Generate on a hanging script = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

func TestArgumentChecks(t *testing.T) {
	if _, err := Generate(context.Background(), "m", "p", -1, 1); err == nil {
		t.Error("Generate accepted maxTokens -1")
	}
	if _, err := GenerateAll(context.Background(), "m", nil, 1, 1); err == nil {
		t.Error("GenerateAll accepted no prompts")
	}
	if _, err := Bench(context.Background(), "m", 0, 256, 256, 3); err == nil {
		t.Error("Bench accepted threads 0")
	}
}

func TestStderrTail(t *testing.T) {
	if got := stderrTail([]byte("  \n")); got != "(empty)" {
		t.Errorf("stderrTail(blank) = %q", got)
	}
	long := strings.Repeat("x", 3000) + "\nlast line\n"
	got := stderrTail([]byte(long))
	if !strings.HasPrefix(got, "...x") || !strings.HasSuffix(got, "x\nlast line") {
		t.Errorf("stderrTail(long) = %q, want \"...\" then the end of the x run and the last line", got)
	}
	lines := strings.Repeat("early line\n", 300) + "last line"
	if got := stderrTail([]byte(lines)); !strings.HasPrefix(got, "...early line\n") {
		t.Errorf("stderrTail(many lines) starts %q, want a whole line after \"...\"", clip(got, 20))
	}
	if len(got) > stderrTailBytes+3 {
		t.Errorf("stderrTail(long) is %d bytes, want <= %d", len(got), stderrTailBytes+3)
	}
}

// golden is one line of testdata/stories260K-greedy.jsonl.
type golden struct {
	Prompt       string `json:"prompt"`
	PromptTokens []int  `json:"prompt_tokens"`
	MaxTokens    int    `json:"max_tokens"`
	Completion   string `json:"completion"`
}

func readGolden(t *testing.T) []golden {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "testdata", "stories260K-greedy.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("golden line %d: %v", len(out)+1, err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("golden file is empty")
	}
	return out
}

// needModel returns the GGUF from $BULKHEAD_PEER_TEST_GGUF, skipping when it
// is unset and failing when it is set but the peer cannot run.
func needModel(t *testing.T) string {
	t.Helper()
	model := os.Getenv(envTestGGUF)
	if model == "" {
		t.Skipf("%s not set", envTestGGUF)
	}
	if err := Available(); err != nil {
		t.Fatalf("%s is set but the peer is unavailable: %v", envTestGGUF, err)
	}
	return model
}

// TestGenerateGolden checks that llama.cpp, given a GGUF of stories260K,
// reproduces the reference greedy completions.
//
// The reference program counts max_tokens as positions after the prompt and
// also prints the token it samples at the last one, so its completions hold
// max_tokens+1 tokens; Generate counts generated tokens, so ask for one more.
func TestGenerateGolden(t *testing.T) {
	model := needModel(t)
	for i, g := range readGolden(t) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := Generate(ctx, model, g.Prompt, g.MaxTokens+1, 1)
		cancel()
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(res.PromptTokens, g.PromptTokens) {
			t.Errorf("line %d %q: prompt tokens %v, golden %v", i+1, g.Prompt, res.PromptTokens, g.PromptTokens)
		}
		if res.Completion != g.Completion {
			t.Errorf("line %d %q: completion differs\nllama.cpp: %q\ngolden:    %q", i+1, g.Prompt, res.Completion, g.Completion)
		}
	}
}

func TestTokenizeGolden(t *testing.T) {
	model := needModel(t)
	g := readGolden(t)[1]
	ids, err := Tokenize(context.Background(), model, g.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, g.PromptTokens) {
		t.Fatalf("Tokenize(%q) = %v, golden %v", g.Prompt, ids, g.PromptTokens)
	}
}

func TestBenchSmoke(t *testing.T) {
	model := needModel(t)
	b, err := Bench(context.Background(), model, 1, 16, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.PrefillTokensPerS <= 0 || b.DecodeTokensPerS <= 0 || b.Threads != 1 || !strings.Contains(b.Version, "llama.cpp") {
		t.Fatalf("Bench = %+v, want positive rates, 1 thread and a llama.cpp version", b)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
