package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

func init() {
	register("generate", "print a completion of --prompt (one-shot, no server)", runGenerate)
	register("license", "print the licence notice of the embedded default model", func(args []string, stdout, stderr io.Writer) error {
		if err := parse(newFlags("license"), args); err != nil {
			return err
		}
		fmt.Fprint(stdout, embeddedLicense())
		return nil
	})
}

// modelFlags are the flags every command that loads a model shares.
type modelFlags struct {
	model, tokenizer string
	threads          int
	kvDType          string
}

func (m *modelFlags) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}) {
	fs.StringVar(&m.model, "model", "", "model file: GGUF, or a llama2.c checkpoint with --tokenizer (default: the embedded stories260K)")
	fs.StringVar(&m.tokenizer, "tokenizer", "", "llama2.c tokenizer file (only with a llama2.c --model)")
	fs.IntVar(&m.threads, "threads", 0, "threads for matrix products (0: one per GOMAXPROCS, the CPUs this process may use)")
	fs.StringVar(&m.kvDType, "kv-dtype", "f32", "KV cache element type: f32 (exact) or f16 (half the memory and attention traffic)")
}

// check refuses --threads below 0 and --model or --tokenizer paths that
// cannot be a model's files (see checkInputFile), before the model is
// opened: opening a named pipe would wait for a writer for ever, and a
// tokenizer is read whole, so /dev/zero would fill memory.
func (m *modelFlags) check() error {
	if m.threads < 0 {
		return usagef("--threads %d: want 0 (one per GOMAXPROCS) or more", m.threads)
	}
	if err := checkInputFile("--model", m.model, 0); err != nil {
		return usageError{err: err}
	}
	if err := checkInputFile("--tokenizer", m.tokenizer, maxTokenizerBytes); err != nil {
		return usageError{err: err}
	}
	return nil
}

// maxTokenizerBytes bounds a llama2.c tokenizer file, which is read whole:
// far above any real one (a 128K vocabulary takes a few MiB).
const maxTokenizerBytes = 64 << 20

// checkInputFile refuses, naming what (a flag, or a config key), a path
// that exists but is not a regular file (a directory, a device such as
// /dev/zero, a named pipe), or one over maxBytes when that is not 0. It
// only stats: opening a named pipe blocks until a writer comes. A missing
// file passes, for the opener's own error to report; so does "", the
// embedded default. A flag's caller makes the error a usageError.
func checkInputFile(what, path string, maxBytes int64) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil
	case fi.IsDir():
		return fmt.Errorf("%s %s is a directory; name the file", what, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file (mode %v); it must be a file on disk", what, path, fi.Mode())
	case maxBytes > 0 && fi.Size() > maxBytes:
		return fmt.Errorf("%s %s is %d bytes, more than the %d MiB allowed; is it the right file?", what, path, fi.Size(), maxBytes>>20)
	}
	return nil
}

// kvType parses --kv-dtype.
func (m *modelFlags) kvType() (model.KVType, error) {
	t, err := model.ParseKVType(m.kvDType)
	if err != nil {
		return 0, usagef("--kv-dtype: %v", err)
	}
	return t, nil
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate")
	var mf modelFlags
	mf.register(fs)
	prompt := fs.String("prompt", "", "text to complete (required)")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate")
	temperature := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 0, "sample among the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass (1: off)")
	seed := fs.Uint64("seed", 0, "random seed for sampling")
	presence := fs.Float64("presence-penalty", 0, "taken off the logit of every token already generated (-2 to 2)")
	frequency := fs.Float64("frequency-penalty", 0, "taken off the logit of a token once per time it was generated (-2 to 2)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *prompt == "" {
		return usagef("--prompt is required")
	}
	if err := checkRange("max-tokens", *maxTokens, 1, math.MaxInt); err != nil {
		return err
	}
	// Checked here, not only by params.Validate, whose errors name the
	// API's fields (top_k), not the flags.
	switch {
	case !(*temperature >= 0 && *temperature <= 100): // NaN too
		return usagef("--temperature must be 0 to 100, got %v", *temperature)
	case *topK < 0:
		return usagef("--top-k must be at least 0 (0: all tokens), got %d", *topK)
	case !(*topP >= 0 && *topP <= 1):
		return usagef("--top-p must be 0 to 1, got %v", *topP)
	case !(*presence >= -2 && *presence <= 2):
		return usagef("--presence-penalty must be -2 to 2, got %v", *presence)
	case !(*frequency >= -2 && *frequency <= 2):
		return usagef("--frequency-penalty must be -2 to 2, got %v", *frequency)
	}
	params := sample.Params{Temperature: float32(*temperature), TopK: *topK, TopP: float32(*topP), Seed: *seed,
		PresencePenalty: float32(*presence), FrequencyPenalty: float32(*frequency)}
	if err := params.Validate(); err != nil {
		return usageError{err: err}
	}
	kvt, err := mf.kvType()
	if err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	m, err := model.Open(mf.model, mf.tokenizer)
	if err != nil {
		return err
	}
	defer m.Close()
	ids := m.Tokenizer.Encode(*prompt, true)
	if *maxTokens > m.Config.ContextLen-len(ids) { // not len(ids)+*maxTokens: that can overflow
		return usagef("prompt has %d tokens and --max-tokens is %d; together they exceed the model's context of %d tokens", len(ids), *maxTokens, m.Config.ContextLen)
	}
	pool := kernels.NewPool(mf.threads)
	defer pool.Close()
	r := m.NewRunner(pool, min(len(ids), 512), len(ids)+*maxTokens)
	cache, err := model.NewDenseCacheOf(&m.Config, len(ids)+*maxTokens, kvt)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	dec := m.Tokenizer.NewDecoder(ids[len(ids)-1])
	var werr error
	_, err = r.Generate(ids, cache, *maxTokens, sample.New(params), func(tok int) bool {
		if _, werr = out.WriteString(dec.Add(tok)); werr != nil {
			return false
		}
		// Flush per token so a terminal shows the text as it is made.
		werr = out.Flush()
		return werr == nil
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	out.WriteString(dec.Flush())
	return out.Flush()
}
