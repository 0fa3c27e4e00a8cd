package audit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// checkOf returns the check with id.
func checkOf(t *testing.T, rep Report, id string) Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %q in the report", id)
	return Check{}
}

// evidence is every finding of c as text, for matching.
func evidence(c Check) string {
	var b strings.Builder
	for _, f := range c.Findings {
		b.WriteString(f.Status.String() + " " + f.Tenant + " | " + f.Request + " | " + f.Expected + " | " + f.Got + " | " + f.Why + "\n")
	}
	return b.String()
}

// TestHonestEndpointPasses: against an endpoint with none of the bugs,
// every check passes, and the text report names each check.
func TestHonestEndpointPasses(t *testing.T) {
	f := &fake{ctxLen: 256}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Status != Pass {
			t.Errorf("%s: %s (%s)\n%s", c.ID, c.Status, c.Summary, evidence(c))
		}
	}
	var b strings.Builder
	if err := WriteText(&b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{CheckOverLimit, CheckSoloEquivalence, CheckCanaries, CheckErrorEcho, CheckPrefixCache} {
		if !strings.Contains(b.String(), "PASS  "+id) {
			t.Errorf("report lacks a PASS line for %s:\n%s", id, b.String())
		}
	}
	if !strings.Contains(b.String(), "PASS: 5 checks passed, 0 failed") {
		t.Errorf("report's verdict:\n%s", b.String())
	}
	if c := checkOf(t, rep, CheckPrefixCache); !strings.Contains(c.Summary, "same tenant's repeats hit the cache") {
		t.Errorf("prefix-cache summary should show that hits are visible: %s", c.Summary)
	}
}

// TestPlaceholderBugCaught: an endpoint that answers over-limit prompts
// fails the over-limit check, with the tenant, the request and the
// explanation.
func TestPlaceholderBugCaught(t *testing.T) {
	f := &fake{ctxLen: 256, placeholder: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckOverLimit)
	ev := evidence(c)
	if c.Status != Fail || !strings.Contains(ev, "over-length prompt answered with 200: the placeholder bug of DESIGN.md section 1") ||
		!strings.Contains(ev, "acme over-limit o0") || !strings.Contains(ev, "400 context_length_exceeded") {
		t.Fatalf("over-limit: %s %s\n%s", c.Status, c.Summary, ev)
	}
	if rep.Status != Fail || strings.Join(rep.Failed(), ",") != CheckOverLimit {
		t.Errorf("report status %s, failed %v", rep.Status, rep.Failed())
	}
}

// TestPlantedLeakCaught: an endpoint that appends one tenant's canary
// prompt to another tenant's responses fails the canaries check, naming
// both tenants and the marker. The same leak breaks solo equivalence.
func TestPlantedLeakCaught(t *testing.T) {
	f := &fake{ctxLen: 256, leak: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckCanaries)
	ev := evidence(c)
	if c.Status != Fail || !strings.Contains(ev, "canary-acme-") || !strings.Contains(ev, "acme's prompt reached globex's response") {
		t.Fatalf("canaries: %s %s\n%s", c.Status, c.Summary, ev)
	}
	if e := checkOf(t, rep, CheckSoloEquivalence); e.Status != Fail {
		t.Errorf("solo-equivalence: %s %s", e.Status, e.Summary)
	}
}

// TestOwnMarkerIsNotALeak: a model that repeats its own tenant's prompt
// passes; only another tenant's marker counts.
func TestOwnMarkerIsNotALeak(t *testing.T) {
	p, _ := NewPlan(testConfig())
	res := make([]Result, len(p.Requests))
	for i, q := range p.Requests {
		res[i] = Result{ID: i, Status: 200, Complete: true, Text: q.PromptText(), Finish: "length"}
	}
	if c := checkOf(t, Evaluate(p, res), CheckCanaries); c.Status != Pass || !strings.Contains(c.Summary, "repeated its own tenant's marker") {
		t.Errorf("canaries: %s %s\n%s", c.Status, c.Summary, evidence(c))
	}
}

// TestDriftCaught: an endpoint whose answers change once a prompt has
// been seen fails solo equivalence with the first difference.
func TestDriftCaught(t *testing.T) {
	f := &fake{ctxLen: 256, drift: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckSoloEquivalence)
	if ev := evidence(c); c.Status != Fail || !strings.Contains(ev, "first difference at byte") || !strings.Contains(ev, "busy") {
		t.Fatalf("solo-equivalence: %s %s\n%s", c.Status, c.Summary, ev)
	}
}

// TestErrorEchoCaught: error messages that quote the prompt fail.
func TestErrorEchoCaught(t *testing.T) {
	f := &fake{ctxLen: 256, echo: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckErrorEcho)
	if ev := evidence(c); c.Status != Fail || !strings.Contains(ev, "its own prompt's marker") {
		t.Fatalf("error-echo: %s %s\n%s", c.Status, c.Summary, ev)
	}
	if o := checkOf(t, rep, CheckOverLimit); o.Status != Pass {
		t.Errorf("over-limit: %s; the refusals were right, only their messages were wrong", o.Status)
	}
}

// TestSharedPrefixCacheCaught: a prefix cache shared by all tenants shows
// as cached tokens on a later tenant's first request; without usage the
// check is skipped, not passed.
func TestSharedPrefixCacheCaught(t *testing.T) {
	f := &fake{ctxLen: 256, sharedCache: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckPrefixCache)
	if ev := evidence(c); c.Status != Fail || !strings.Contains(ev, "globex") || !strings.Contains(ev, "only acme had sent this prefix") {
		t.Fatalf("prefix-cache: %s %s\n%s", c.Status, c.Summary, ev)
	}
	f = &fake{ctxLen: 256, noUsage: true}
	rep, err = f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkOf(t, rep, CheckPrefixCache); c.Status != Skip || !strings.Contains(c.Summary, "reports no usage.prompt_tokens_details.cached_tokens") {
		t.Errorf("prefix-cache without usage: %s %s", c.Status, c.Summary)
	}
}

// TestRefusedKeyStopsTheAudit: a key the endpoint refuses is a setup
// error that names the tenant and the 401, not a leak.
func TestRefusedKeyStopsTheAudit(t *testing.T) {
	f := &fake{ctxLen: 256, badKey: "globex"}
	p, _ := NewPlan(testConfig())
	_, err := Run(context.Background(), p, f, Options{Concurrency: 4})
	var be *BaselineError
	if !errors.As(err, &be) || be.Tenant != "globex" || !strings.Contains(err.Error(), `refused tenant "globex"'s API key`) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("error %v, want a BaselineError for globex's 401", err)
	}
	if f.requests != 2 {
		t.Errorf("%d requests sent; the audit should stop at globex's first", f.requests)
	}
}

// TestRunBoundsConcurrency: the mixed traffic really is concurrent, never
// beyond the bound, and every request gets its result. Run it with -race.
func TestRunBoundsConcurrency(t *testing.T) {
	f := &fake{ctxLen: 256, delay: time.Millisecond}
	p, _ := NewPlan(testConfig())
	done := 0
	res, err := Run(context.Background(), p, f, Options{Concurrency: 5, Progress: func(d, total int) {
		done = d
		if total != len(p.Requests) {
			t.Errorf("progress total %d, want %d", total, len(p.Requests))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.maxInflight < 2 || f.maxInflight > 5 {
		t.Errorf("%d requests in flight at most; want 2 to 5", f.maxInflight)
	}
	if done != len(p.Requests) || f.requests != len(p.Requests) {
		t.Errorf("progress %d, sent %d; want %d", done, f.requests, len(p.Requests))
	}
	for i, r := range res {
		if r.ID != i || r.Status == 0 {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
}

// TestRunStopsOnCancel: a cancelled run returns its error and marks what
// it did not send.
func TestRunStopsOnCancel(t *testing.T) {
	f := &fake{ctxLen: 256, delay: 2 * time.Millisecond}
	p, _ := NewPlan(testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	res, err := Run(ctx, p, f, Options{Concurrency: 2, Progress: func(d, _ int) {
		if d == p.SoloCount()+4 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if last := res[len(res)-1]; last.Transport != "not sent" {
		t.Errorf("last request: %+v, want not sent", last)
	}
	rep := Evaluate(p, res)
	// The mixed probes that were never sent are counted and flagged, so
	// the check cannot pass.
	if c := checkOf(t, rep, CheckSoloEquivalence); c.Status == Pass || !strings.Contains(c.Summary, " not compared") ||
		!strings.Contains(evidence(c), "not sent") {
		t.Errorf("a cancelled run should not look complete: %s %s\n%s", c.Status, c.Summary, evidence(c))
	}
}

// TestRunTimeout: a request past its deadline is reported as such.
func TestRunTimeout(t *testing.T) {
	f := &fake{ctxLen: 256, delay: time.Second}
	p, _ := NewPlan(testConfig())
	_, err := Run(context.Background(), p, f, Options{Timeout: 5 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no complete response within the 5ms timeout") {
		t.Fatalf("error %v", err)
	}
}

// TestRunInterruptedDuringASoloProbe: an interrupt while a solo probe is
// in flight is an interrupt, not a failed baseline blamed on the tenant.
func TestRunInterruptedDuringASoloProbe(t *testing.T) {
	f := &fake{ctxLen: 256, delay: time.Second}
	p, _ := NewPlan(testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := Run(ctx, p, f, Options{})
	var be *BaselineError
	if !errors.Is(err, context.Canceled) || errors.As(err, &be) {
		t.Fatalf("error %v, want the interrupt", err)
	}
}

// TestRunRetriesRateLimits: an endpoint that answers some requests 429
// (a rate limit, or the audit's own concurrency over a tenant's limit) is
// not a failed audit: Run sends them again after the wait it asks for,
// and every check passes.
func TestRunRetriesRateLimits(t *testing.T) {
	f := &fake{ctxLen: 256, throttle: 5}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4, RetryWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Status != Pass {
			t.Errorf("%s: %s (%s)\n%s", c.ID, c.Status, c.Summary, evidence(c))
		}
	}
}

// TestPrefixCacheBlind: an endpoint that reports cached_tokens but never
// a hit, not even on a tenant's own repeat, shows nothing the check could
// judge; that is a skip, not a pass.
func TestPrefixCacheBlind(t *testing.T) {
	f := &fake{ctxLen: 256, sharedCache: true, zeroCached: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkOf(t, rep, CheckPrefixCache); c.Status != Skip || !strings.Contains(c.Summary, "not even") {
		t.Errorf("prefix-cache on an endpoint that shows no hit: %s %s", c.Status, c.Summary)
	}
}

// TestContaminatedBaselineCaught: an endpoint whose every answer to a
// tenant depends on another tenant's earlier prompt, alone as much as
// under load, gives baselines that its mixed answers match. The shared
// probe p1 is the same request for every tenant, so its baselines must
// match across tenants, and there the contamination shows.
func TestContaminatedBaselineCaught(t *testing.T) {
	f := &fake{ctxLen: 256, sticky: true}
	rep, err := f.audit(testConfig(), Options{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := checkOf(t, rep, CheckSoloEquivalence)
	if ev := evidence(c); c.Status != Fail || !strings.Contains(ev, "globex probe p1") || !strings.Contains(ev, "acme") {
		t.Fatalf("solo-equivalence: %s %s\n%s", c.Status, c.Summary, ev)
	}
}
