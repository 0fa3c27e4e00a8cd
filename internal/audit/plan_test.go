package audit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestPlanDeterministic: a plan is a function of its Config alone, down to
// every body's bytes; another seed changes the markers and the mixed
// order but not what is sent.
func TestPlanDeterministic(t *testing.T) {
	a, err := NewPlan(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPlan(testConfig())
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans from the same Config differ")
	}
	for i := range a.Requests {
		if !bytes.Equal(a.Requests[i].Body("m"), b.Requests[i].Body("m")) {
			t.Fatalf("%s: bodies differ between equal plans", a.Requests[i].String())
		}
	}
	cfg := testConfig()
	cfg.Seed++
	c, _ := NewPlan(cfg)
	if reflect.DeepEqual(a.Markers, c.Markers) {
		t.Error("another seed gave the same markers")
	}
	same := true
	for i := a.SoloCount(); i < len(a.Requests); i++ {
		if a.Requests[i].Key() != c.Requests[i].Key() || a.Requests[i].Round != c.Requests[i].Round {
			same = false
		}
	}
	if same {
		t.Error("another seed gave the same mixed order")
	}
	if len(a.Requests) != len(c.Requests) || a.SoloCount() != c.SoloCount() {
		t.Errorf("another seed changed the number of requests: %d/%d solo, %d/%d", a.SoloCount(), len(a.Requests), c.SoloCount(), len(c.Requests))
	}
}

// TestPlanShape: the plan holds what the checks need, in the order they
// need it.
func TestPlanShape(t *testing.T) {
	cfg := testConfig()
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	T := len(cfg.Tenants)
	// Per tenant: 3 probes in 4 modes, 4 canaries, 4 over-limit prompts.
	if got, want := p.SoloCount(), T*(12+4); got != want {
		t.Errorf("%d solo requests, want %d", got, want)
	}
	if got, want := len(p.Requests)-p.SoloCount(), cfg.Rounds*T*20; got != want {
		t.Errorf("%d mixed requests, want %d", got, want)
	}
	for i, r := range p.Requests {
		if r.ID != i {
			t.Fatalf("request %d has ID %d", i, r.ID)
		}
		if (i < p.SoloCount()) != (r.Phase == Solo) {
			t.Fatalf("%s out of its phase's place", r.String())
		}
		if r.FirstContact != (i < T) {
			t.Errorf("%s: FirstContact %v", r.String(), r.FirstContact)
		}
		if i < T && (r.Tenant != cfg.Tenants[i] || r.Name != "p0" || r.Endpoint != Completions || r.Stream) {
			t.Errorf("first contact %d is %s; want %s's p0, completions, not streamed", i, r.String(), cfg.Tenants[i])
		}
		for _, m := range r.Markers {
			if m.Tenant != r.Tenant || !strings.Contains(r.PromptText(), m.Word()) {
				t.Errorf("%s: marker %s is not its own or not in its prompt", r.String(), m.Word())
			}
		}
	}
	// The shared prefix: every tenant's p0 starts with the nonce and the
	// same long story; the tails differ.
	p0 := map[string]string{}
	for _, r := range p.Requests[:T] {
		p0[r.Tenant] = r.PromptText()
	}
	for _, tn := range cfg.Tenants {
		if !strings.HasPrefix(p0[tn], cfg.Nonce+". "+sharedStory) {
			t.Errorf("%s's p0 does not start with the nonce and the shared story: %q", tn, p0[tn])
		}
	}
	if p0["acme"] == p0["globex"] {
		t.Error("p0 is identical across tenants; its tail should differ")
	}
	// Markers: 6 per tenant, 16 hex digits, no 8-digit window shared
	// between tenants.
	if len(p.Markers) != 6*T {
		t.Errorf("%d markers, want %d", len(p.Markers), 6*T)
	}
	owner := map[string]string{}
	for _, m := range p.Markers {
		if len(m.Hex) != 16 || strings.Trim(m.Hex, "0123456789abcdef") != "" {
			t.Errorf("marker %s: hex %q", m.Word(), m.Hex)
		}
		for _, w := range windows(m.Hex) {
			if o, ok := owner[w]; ok && o != m.Tenant {
				t.Errorf("window %s in markers of %s and %s", w, o, m.Tenant)
			}
			owner[w] = m.Tenant
		}
	}
}

// TestPlanBodies: greedy, seeded, bounded requests; streams ask for usage;
// over-limit prompts are one token over the context.
func TestPlanBodies(t *testing.T) {
	p, _ := NewPlan(testConfig())
	for _, r := range p.Requests[:p.SoloCount()] {
		var b struct {
			Model         string          `json:"model"`
			Prompt        json.RawMessage `json:"prompt"`
			Messages      []struct{ Role, Content string }
			MaxTokens     int     `json:"max_tokens"`
			Temperature   float64 `json:"temperature"`
			Seed          *uint64 `json:"seed"`
			Stream        bool    `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(r.Body("m"), &b); err != nil {
			t.Fatalf("%s: %v", r.String(), err)
		}
		wantMax := DefaultMaxTokens
		if r.Kind == OverLimit {
			wantMax = 128
		}
		if b.Model != "m" || b.MaxTokens != wantMax || b.Temperature != 0 || b.Seed == nil || *b.Seed != 7 || b.Stream != r.Stream {
			t.Errorf("%s: body %+v", r.String(), b)
		}
		if r.Stream != (b.StreamOptions != nil && b.StreamOptions.IncludeUsage) {
			t.Errorf("%s: stream_options %+v", r.String(), b.StreamOptions)
		}
		switch {
		case r.Endpoint == Chat:
			if len(b.Messages) != 1 || b.Messages[0].Role != "user" || b.Messages[0].Content != r.PromptText() || b.Prompt != nil {
				t.Errorf("%s: messages %+v", r.String(), b.Messages)
			}
			if r.Kind == OverLimit && len(strings.Fields(r.PromptText())) != 257+1 {
				t.Errorf("%s: %d words, want the marker and 257", r.String(), len(strings.Fields(r.PromptText())))
			}
		case r.Kind == OverLimit:
			var ids []int
			if err := json.Unmarshal(b.Prompt, &ids); err != nil || len(ids) != 257 {
				t.Errorf("%s: prompt is %d ids (%v), want 257", r.String(), len(ids), err)
			}
			for _, id := range ids {
				if id < 0 || id >= 259 {
					t.Fatalf("%s: id %d outside every vocabulary's first 259", r.String(), id)
				}
			}
		default:
			var s string
			if json.Unmarshal(b.Prompt, &s) != nil || s != r.PromptText() {
				t.Errorf("%s: prompt %s", r.String(), b.Prompt)
			}
		}
	}
	cfg := testConfig()
	cfg.ContextLen = 0
	d, _ := NewPlan(cfg)
	if d.OverLength != DefaultOverLength {
		t.Errorf("unknown context: over-limit prompts of %d tokens, want %d", d.OverLength, DefaultOverLength)
	}
}

func TestPlanRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"one tenant", func(c *Config) { c.Tenants = c.Tenants[:1] }, "at least two tenants"},
		{"twice", func(c *Config) { c.Tenants = []string{"a", "b", "a"} }, `"a" is named twice`},
		{"bad name", func(c *Config) { c.Tenants = []string{"a", "b c"} }, `tenant name "b c"`},
		{"no model", func(c *Config) { c.Model = "" }, "no model"},
		{"no rounds", func(c *Config) { c.Rounds = 0 }, "0 rounds"},
		{"huge context", func(c *Config) { c.ContextLen = MaxOverLength }, "context length"},
	} {
		cfg := testConfig()
		c.edit(&cfg)
		if _, err := NewPlan(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
