package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/audit"
	"github.com/bulkhead-llm/bulkhead/internal/loadgen"
)

func init() {
	register("audit", "black-box leak audit of an OpenAI-compatible endpoint: canaries, solo equivalence, over-limit prompts", runAudit)
}

// minAuditKeyLen is the shortest API key the audit takes. Every key is
// removed from what the endpoint sends back; a shorter one would remove
// pieces of ordinary text too, and of the canary markers the audit looks
// for, hiding a leak.
const minAuditKeyLen = 8

// tenantKeyFlags collects repeated --key NAME=APIKEY flags, in order.
type tenantKeyFlags struct {
	names []string
	keys  map[string]string
	// err is the first bad flag's. Set records it and returns nil: the
	// flag package would print the flag's value, the key, with an error.
	err error
}

func (f *tenantKeyFlags) String() string { return strings.Join(f.names, ",") } // names only, never keys

func (f *tenantKeyFlags) Set(v string) error {
	if err := f.set(v); err != nil && f.err == nil {
		f.err = fmt.Errorf("--key: %w", err)
	}
	return nil
}

// check reports the first bad --key, or two tenants with one key.
func (f *tenantKeyFlags) check() error {
	if f.err != nil {
		return f.err
	}
	owner := map[string]string{}
	for _, n := range f.names {
		if o, ok := owner[f.keys[n]]; ok {
			return fmt.Errorf("tenants %q and %q have the same API key: the endpoint would see one tenant, so nothing could cross between them", o, n)
		}
		owner[f.keys[n]] = n
	}
	return nil
}

func (f *tenantKeyFlags) set(v string) error {
	name, key, ok := strings.Cut(v, "=")
	// A key without NAME= may still hold a '=': base64 padding is one.
	if !ok || name == "" || key != "" && strings.Trim(key, "=") == "" {
		return errors.New("want NAME=APIKEY (or NAME=env:VARIABLE); the value is not shown, as it may be a key")
	}
	if env, ok := strings.CutPrefix(key, "env:"); ok {
		key = os.Getenv(env)
		if key == "" {
			return fmt.Errorf("tenant %q: environment variable %s is empty or unset", name, env)
		}
	}
	if key == "" {
		return fmt.Errorf("tenant %q has an empty API key", name)
	}
	if badHeaderValue(key) {
		return fmt.Errorf("tenant %q's API key holds a control character, such as a line ending copied from a file; it cannot be sent in a header", name)
	}
	if len(key) < minAuditKeyLen {
		return fmt.Errorf("tenant %q's API key is %d characters; the audit needs at least %d, as it removes every key from what the endpoint sends back", name, len(key), minAuditKeyLen)
	}
	if _, dup := f.keys[name]; dup {
		return fmt.Errorf("tenant %q is given twice", name)
	}
	if f.keys == nil {
		f.keys = map[string]string{}
	}
	f.names = append(f.names, name)
	f.keys[name] = key
	return nil
}

// runAudit is `bulkhead audit`: a black-box leak audit of any
// OpenAI-compatible endpoint. The work is in package audit; this file
// turns flags into a plan, runs it through an HTTP client, and prints the
// report. Exit status: 0 when no check failed, 1 when one did or the audit
// could not run, 2 for a usage error.
func runAudit(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("audit")
	var keys tenantKeyFlags
	target := fs.String("target", "", "base URL of the endpoint, like http://127.0.0.1:8080 (required)")
	fs.Var(&keys, "key", "a tenant as NAME=APIKEY, or NAME=env:VARIABLE to read the key from the environment; at least two")
	modelName := fs.String("model", "", "model to request (default: the first one GET /v1/models lists)")
	rounds := fs.Int("rounds", 3, "rounds of concurrent mixed traffic")
	concurrency := fs.Int("concurrency", 8, "requests in flight during the mixed traffic")
	seed := fs.Uint64("seed", 1, "seed of the canary markers and of the mixed order")
	contextLen := fs.Int("context-len", 0, fmt.Sprintf("the endpoint's context length in tokens; over-limit prompts are one token longer (default: the length GET /v1/models reports, else %d-token prompts)", audit.DefaultOverLength))
	timeout := fs.Duration("timeout", 60*time.Second, "deadline of each request, to the end of its body")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := keys.check(); err != nil {
		return usageError{err: err}
	}
	if *target == "" {
		return usagef("--target is required, like --target http://127.0.0.1:8080")
	}
	if len(keys.names) < 2 {
		return usagef("an audit needs at least two tenants, got %d: pass --key NAME=APIKEY once per tenant", len(keys.names))
	}
	if len(keys.names) > audit.MaxTenants {
		return usagef("--key is given for %d tenants; an audit takes at most %d", len(keys.names), audit.MaxTenants)
	}
	base, err := loadgen.CheckTarget(*target, true)
	if err != nil {
		return usagef("--target: %v", err)
	}
	if err := checkRange("rounds", *rounds, 1, audit.MaxRounds); err != nil {
		return err
	}
	if err := checkRange("concurrency", *concurrency, 1, loadgen.MaxConcurrency); err != nil {
		return err
	}
	if err := checkRange("context-len", *contextLen, 0, audit.MaxOverLength-1); err != nil {
		return usagef("%v (0: the length GET /v1/models reports)", err)
	}
	if *timeout <= 0 {
		return usagef("--timeout must be a positive duration, got %v", *timeout)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	cfg := audit.Config{Tenants: keys.names, Model: *modelName, Seed: *seed, Rounds: *rounds, ContextLen: *contextLen,
		Nonce: hex.EncodeToString(nonce[:])}
	// The flags alone must make a valid plan; the model may still be
	// unknown, so check with a stand-in.
	check := cfg
	if check.Model == "" {
		check.Model = "any"
	}
	if _, err := audit.NewPlan(check); err != nil {
		// The counts are checked above, so what is left is a tenant's
		// name.
		return usagef("--key: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client := audit.NewHTTPClient(base, keys.keys, *concurrency)
	defer client.Close()
	// Every key first: a refused key is a setup error, not a finding.
	reported := 0 // the context length the first tenant's list gives the model
	for i, t := range keys.names {
		mctx, cancel := context.WithTimeout(ctx, *timeout)
		models, err := client.ListModels(mctx, t)
		cancel()
		if err != nil {
			return err
		}
		if cfg.Model == "" {
			if len(models) == 0 {
				return fmt.Errorf("GET /v1/models lists no model for tenant %q; name one with --model", t)
			}
			cfg.Model = models[0].ID
		}
		for _, m := range models {
			if i == 0 && m.ID == cfg.Model {
				reported = m.ContextLen
			}
		}
	}
	// Without --context-len, the length the endpoint reports: a fixed
	// guess is under the context of some models, whose correct answers
	// to the "over-limit" prompts would then be failed.
	if cfg.ContextLen == 0 && reported > 0 && reported < audit.MaxOverLength {
		cfg.ContextLen, cfg.ContextLenSource = reported, "GET /v1/models"
	}
	plan, err := audit.NewPlan(cfg)
	if err != nil {
		return err
	}
	results, runErr := audit.Run(ctx, plan, client, audit.Options{Concurrency: *concurrency, Timeout: *timeout})
	if be := new(audit.BaselineError); errors.As(runErr, &be) {
		return fmt.Errorf("%w (stopped before any concurrent traffic; no check was judged)", runErr)
	}
	rep := audit.Evaluate(plan, results)
	rep.Target, rep.Concurrency = base.String(), *concurrency
	if *asJSON {
		b, err := json.MarshalIndent(&rep, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else if err := audit.WriteText(stdout, &rep); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if failed := rep.Failed(); len(failed) > 0 {
		return fmt.Errorf("%d of %d checks failed: %s", len(failed), len(rep.Checks), strings.Join(failed, ", "))
	}
	return nil
}
