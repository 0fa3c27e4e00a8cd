package audit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPlanDoesNotHoldOverLimitPrompts: a plan at the top of the context
// range holds no over-limit prompt text. Each is built when its request
// is sent (and then some 20 MB); building them all up front took 2.4 GB
// for 64 tenants before anything was sent. Measured with 8 tenants, so
// that the old behaviour (about 350 MB) fails without straining the
// machine.
func TestPlanDoesNotHoldOverLimitPrompts(t *testing.T) {
	cfg := Config{Model: "m", Seed: 1, Rounds: 2, ContextLen: MaxOverLength - 1}
	for i := range 8 {
		cfg.Tenants = append(cfg.Tenants, fmt.Sprintf("t%d", i))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("NewPlan allocated %d MB for %d tenants; it must not build the over-limit prompts", got>>20, len(cfg.Tenants))
	}
	// The prompts are still there when asked for: the marker, then one
	// filler word per token of the over-limit length.
	for i := range p.Requests {
		q := &p.Requests[i]
		if q.Kind != OverLimit || q.Endpoint != Chat {
			continue
		}
		text := q.PromptText()
		if !strings.HasPrefix(text, q.Markers[0].Word()+" ") || strings.Count(text, " ") != p.OverLength {
			t.Fatalf("%s: prompt of %d bytes, %d words; want the marker and %d filler words", q, len(text), strings.Count(text, " ")+1, p.OverLength)
		}
		if body := q.Body("m"); len(body) < len(text) || !strings.Contains(string(body[:200]), q.Markers[0].Word()) {
			t.Fatalf("%s: body of %d bytes does not carry the %d-byte prompt", q, len(body), len(text))
		}
		break
	}
}

// TestOverLimitRequestsInFlightAreBounded: however many requests the
// audit runs at once, at most maxOverLimitInFlight of them are over-limit
// prompts, each of which builds tens of megabytes at the top of the
// context range when it is sent.
func TestOverLimitRequestsInFlightAreBounded(t *testing.T) {
	f := &fake{ctxLen: 256, delay: 5 * time.Millisecond, overDelay: 20 * time.Millisecond}
	cfg := testConfig()
	cfg.Tenants = append(cfg.Tenants, "initech", "umbrella", "soylent")
	if _, err := f.audit(cfg, Options{Concurrency: 16}); err != nil {
		t.Fatal(err)
	}
	if f.maxInflight < 4 {
		t.Fatalf("at most %d requests were in flight at once; the test needs more to mean anything", f.maxInflight)
	}
	if f.maxOverInfl > maxOverLimitInFlight || f.maxOverInfl == 0 {
		t.Fatalf("%d over-limit requests were in flight at once (of %d in all); want 1 to %d", f.maxOverInfl, f.maxInflight, maxOverLimitInFlight)
	}
}
