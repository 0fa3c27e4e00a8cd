package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
)

// Endpoint is the path of an OpenAI-compatible generation API.
type Endpoint string

// The two generation APIs the audit drives.
const (
	// Completions is the legacy completions API: a prompt in, text out.
	Completions Endpoint = "/v1/completions"
	// Chat is the chat completions API: messages in, a message out.
	Chat Endpoint = "/v1/chat/completions"
)

// short is the endpoint's name in reports.
func (e Endpoint) short() string {
	if e == Chat {
		return "chat"
	}
	return "completions"
}

// Kind says what a planned request is for.
type Kind int

const (
	// Probe is a greedy prompt whose output under mixed traffic must equal
	// its solo baseline.
	Probe Kind = iota
	// Canary carries one of its tenant's markers.
	Canary
	// OverLimit is longer than the context and must be refused.
	OverLimit
)

// String is the kind as reports name it.
func (k Kind) String() string {
	switch k {
	case Probe:
		return "probe"
	case Canary:
		return "canary"
	default:
		return "over-limit"
	}
}

// Phase says when a request is sent.
type Phase int

const (
	// Solo requests are sent one at a time, before any concurrency: the
	// probes' baselines and one refusal of each over-limit prompt.
	Solo Phase = iota
	// Mixed requests are sent concurrently, in the plan's shuffled order.
	Mixed
)

// Limits of a Config.
const (
	// MaxTenants bounds Config.Tenants.
	MaxTenants = 64
	// MaxRounds bounds Config.Rounds.
	MaxRounds = 1000
	// DefaultOverLength is the length of the over-limit prompts when the
	// context length is not known: one token over 131,072, the context of
	// the many 128K models (Llama 3.1, Qwen2.5...), so that a prompt of
	// exactly their context, which fits it, is not taken for an over-long
	// one. A longer context needs its length (Config.ContextLen).
	DefaultOverLength = 1<<17 + 1
	// MaxOverLength bounds Config.ContextLen+1, and so the size of a
	// request body: about 4 bytes of JSON per token id, 6 per word of the
	// over-limit chat text.
	MaxOverLength = 1 << 22
	// DefaultMaxTokens is the max_tokens of probes and canaries.
	DefaultMaxTokens = 24
)

// Config is everything a plan is derived from. Equal Configs give equal
// plans.
type Config struct {
	// Tenants names the tenants, at least two. Names identify tenants in
	// markers and reports; the keys stay with the Client.
	Tenants []string
	// Model is the "model" of every request.
	Model string
	// Seed derives the markers and the mixed order.
	Seed uint64
	// Rounds is how many times the mixed traffic repeats every tenant's
	// probes, canaries and over-limit prompts.
	Rounds int
	// ContextLen is the endpoint's context length in tokens, when known:
	// the over-limit prompts are then ContextLen+1 tokens long. Zero: they
	// are DefaultOverLength tokens.
	ContextLen int
	// ContextLenSource says where ContextLen came from when the operator
	// did not give it ("GET /v1/models"); "" when given, or unknown. A
	// length the audit found or guessed may be wrong, and the over-limit
	// check then says how to give the real one.
	ContextLenSource string
	// MaxTokens is the max_tokens of probes and canaries (0: the default).
	MaxTokens int
	// Nonce starts the shared-prefix probe, so that what an earlier audit
	// sent cannot be a prefix-cache hit in this one. Any short string; the
	// command draws a random one per run.
	Nonce string
}

// Marker is a canary secret: a word no model would produce on its own,
// planted in one tenant's prompt and looked for in everyone else's
// responses.
type Marker struct {
	// Tenant owns the marker.
	Tenant string `json:"tenant"`
	// Label is the request kind's name of the prompt carrying it ("c0").
	Label string `json:"label"`
	// Hex is 16 lowercase hex digits derived from the seed, the tenant and
	// the label; any 8 consecutive digits of it count as a leak.
	Hex string `json:"hex"`
}

// Word is the marker as it appears in the prompt.
func (m Marker) Word() string { return "canary-" + m.Tenant + "-" + m.Hex }

// Request is one planned request.
type Request struct {
	// ID is the request's index in Plan.Requests.
	ID int
	// Phase and Round (1 to Rounds for Mixed, 0 for Solo) say when it is
	// sent.
	Phase Phase
	Round int
	// Tenant sends it.
	Tenant string
	// Kind and Name ("p0", "c2", "o1") say which prompt it carries.
	Kind Kind
	Name string
	// Endpoint and Stream say how.
	Endpoint Endpoint
	Stream   bool
	// FirstContact marks the tenant's first request of the audit: nothing
	// this tenant sent before can be a prefix-cache hit for it.
	FirstContact bool
	// Markers are the markers in the prompt (the request's own tenant's).
	Markers []Marker

	text string // the prompt, unless it is token ids or filler
	ids  int    // a token-array prompt of this many ids
	// fill, when set, makes the prompt the marker's word and fill filler
	// words (overLimitText), built each time it is needed rather than
	// kept: at the top of the ranges each such prompt is some 20 MB, and
	// a plan has two per tenant.
	fill      int
	salt      uint64 // varies the ids
	maxTokens int
	seed      uint64
}

// Key identifies a probe's prompt and mode, the same in its solo baseline
// and in every mixed round.
func (r *Request) Key() string {
	return fmt.Sprintf("%s/%s/%s/%t", r.Tenant, r.Name, r.Endpoint, r.Stream)
}

// PromptText is the prompt's text; "" for a token-array prompt. An
// over-limit text prompt is built anew by each call (it can be tens of
// megabytes, more than a plan should hold per request).
func (r *Request) PromptText() string {
	if r.fill > 0 {
		return overLimitText(r.Markers[0].Word(), r.fill)
	}
	return r.text
}

// String describes the request for a report, without its prompt.
func (r *Request) String() string {
	mode := "not streamed"
	if r.Stream {
		mode = "streamed"
	}
	when := "solo"
	if r.Phase == Mixed {
		when = fmt.Sprintf("mixed round %d", r.Round)
	}
	return fmt.Sprintf("request #%d (%s %s %s, %s %s, %s)", r.ID, r.Tenant, r.Kind, r.Name, r.Endpoint.short(), mode, when)
}

// Body is the JSON body of the request for model. Its "seed" is the
// audit's seed below 2^31, a range every server accepts; greedy requests
// do not depend on it, it only pins the sampler of servers that use one.
func (r *Request) Body(model string) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	body := struct {
		Model         string         `json:"model"`
		Prompt        any            `json:"prompt,omitempty"`
		Messages      []message      `json:"messages,omitempty"`
		MaxTokens     int            `json:"max_tokens"`
		Temperature   float64        `json:"temperature"`
		Seed          int64          `json:"seed"`
		Stream        bool           `json:"stream,omitempty"`
		StreamOptions *streamOptions `json:"stream_options,omitempty"`
	}{Model: model, MaxTokens: r.maxTokens, Seed: int64(r.seed % (1 << 31)), Stream: r.Stream}
	if r.Stream {
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	switch {
	case r.Endpoint == Chat:
		body.Messages = []message{{Role: "user", Content: r.PromptText()}}
	case r.ids > 0:
		body.Prompt = overLimitIDs(r.ids, r.salt)
	default:
		body.Prompt = r.PromptText()
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err) // strings, ints and a float: cannot fail
	}
	return b
}

// Plan is every request of an audit, in sending order: the Solo requests
// first, then the Mixed ones.
type Plan struct {
	// Config is what the plan was derived from, with defaults filled in.
	Config Config
	// Markers are every tenant's markers.
	Markers []Marker
	// Requests are the requests; Requests[i].ID == i.
	Requests []Request
	// OverLength is the token length of the over-limit prompts.
	OverLength int
}

// SoloCount is how many requests, from the start of Requests, are Solo.
func (p *Plan) SoloCount() int {
	n := 0
	for n < len(p.Requests) && p.Requests[n].Phase == Solo {
		n++
	}
	return n
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// probe modes: every probe prompt goes to both APIs, streamed and not.
var modes = []struct {
	ep     Endpoint
	stream bool
}{{Completions, false}, {Completions, true}, {Chat, false}, {Chat, true}}

// NewPlan derives the plan of an audit from cfg. It fails on a Config that
// cannot make a meaningful audit: fewer than two tenants, a repeated or
// unusable tenant name, no model, or a count out of range.
func NewPlan(cfg Config) (*Plan, error) {
	if len(cfg.Tenants) < 2 {
		return nil, fmt.Errorf("an audit needs at least two tenants, got %d: a leak goes from one tenant to another", len(cfg.Tenants))
	}
	if len(cfg.Tenants) > MaxTenants {
		return nil, fmt.Errorf("%d tenants; at most %d", len(cfg.Tenants), MaxTenants)
	}
	seen := map[string]bool{}
	for _, t := range cfg.Tenants {
		if !tenantName.MatchString(t) {
			return nil, fmt.Errorf("tenant name %q: use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", t)
		}
		if seen[t] {
			return nil, fmt.Errorf("tenant %q is named twice", t)
		}
		seen[t] = true
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("no model named")
	}
	if cfg.Rounds < 1 || cfg.Rounds > MaxRounds {
		return nil, fmt.Errorf("%d rounds; want 1 to %d", cfg.Rounds, MaxRounds)
	}
	if cfg.ContextLen < 0 || cfg.ContextLen >= MaxOverLength {
		return nil, fmt.Errorf("context length %d; want 1 to %d, or 0 when unknown", cfg.ContextLen, MaxOverLength-1)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.MaxTokens < 1 || cfg.MaxTokens > 4096 {
		return nil, fmt.Errorf("max_tokens %d; want 1 to 4096", cfg.MaxTokens)
	}
	cfg.Tenants = append([]string(nil), cfg.Tenants...)
	p := &Plan{Config: cfg, OverLength: DefaultOverLength}
	if cfg.ContextLen > 0 {
		p.OverLength = cfg.ContextLen + 1
	}
	p.Markers = makeMarkers(cfg.Seed, cfg.Tenants)
	markers := map[string]Marker{}
	for _, m := range p.Markers {
		markers[m.Tenant+"/"+m.Label] = m
	}

	// Each tenant's requests of one round: probes in every mode, then
	// canaries, then over-limit prompts.
	round := func(t string, ti int) []Request {
		variant := ti + int(cfg.Seed%uint64(len(openings)))
		var out []Request
		for _, name := range []string{"p0", "p1", "p2"} {
			for _, m := range modes {
				out = append(out, Request{Tenant: t, Kind: Probe, Name: name, Endpoint: m.ep, Stream: m.stream,
					text: probePrompt(name, cfg.Nonce, variant)})
			}
		}
		for i, name := range []string{"c0", "c1", "c2", "c3"} {
			m := markers[t+"/"+name]
			out = append(out, Request{Tenant: t, Kind: Canary, Name: name, Endpoint: modes[i].ep, Stream: modes[i].stream,
				Markers: []Marker{m}, text: canaryPrompt(name, m.Word(), variant)})
		}
		for i, name := range []string{"o0", "o1", "o2", "o3"} {
			r := Request{Tenant: t, Kind: OverLimit, Name: name, Endpoint: Completions, Stream: i%2 == 1}
			if i < 2 {
				r.ids, r.salt = p.OverLength, cfg.Seed+uint64(ti)
			} else {
				m := markers[t+"/"+name]
				r.Endpoint, r.Markers, r.fill = Chat, []Marker{m}, p.OverLength
			}
			out = append(out, r)
		}
		for i := range out {
			out[i].maxTokens, out[i].seed = cfg.MaxTokens, cfg.Seed
			if out[i].Kind == OverLimit {
				out[i].maxTokens = overLimitMaxTokens(cfg.ContextLen)
			}
		}
		return out
	}
	rounds := make([][]Request, len(cfg.Tenants))
	for i, t := range cfg.Tenants {
		rounds[i] = round(t, i)
	}

	// Solo: each tenant's first contact (p0, completions, not streamed)
	// in tenant order, so that every tenant after the first sends a
	// prefix another tenant has just sent; then the other probes; then
	// one refusal of each over-limit prompt.
	var solo []Request
	for _, rs := range rounds {
		r := rs[0]
		r.FirstContact = true
		solo = append(solo, r)
	}
	for _, rs := range rounds {
		for _, r := range rs[1:] {
			if r.Kind == Probe {
				solo = append(solo, r)
			}
		}
	}
	for _, rs := range rounds {
		for _, r := range rs {
			if r.Kind == OverLimit {
				solo = append(solo, r)
			}
		}
	}
	var mixed []Request
	for rd := 1; rd <= cfg.Rounds; rd++ {
		for _, rs := range rounds {
			for _, r := range rs {
				r.Phase, r.Round = Mixed, rd
				mixed = append(mixed, r)
			}
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6175646974)) // "audit"
	rng.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	p.Requests = append(solo, mixed...)
	for i := range p.Requests {
		p.Requests[i].ID = i
	}
	return p, nil
}

// overLimitMaxTokens is the max_tokens of the over-limit prompts. Their
// prompt alone is over the context, so a correct server refuses them
// whatever it is; a long one keeps a server that admits them anyway (the
// placeholder bug) generating well after its first text, so that a stream
// shows the 200 instead of failing before it starts.
func overLimitMaxTokens(contextLen int) int {
	if contextLen > 0 {
		return max(1, min(128, contextLen/2))
	}
	return 128
}

// markerLabels are the prompts that carry a marker.
var markerLabels = []string{"c0", "c1", "c2", "c3", "o2", "o3"}

// makeMarkers derives every tenant's markers from the seed. A marker whose
// 8-digit windows overlap another tenant's (a chance of about 1 in 10^8
// per pair) is derived again with a counter, so that a window found in a
// response names exactly one owner.
func makeMarkers(seed uint64, tenants []string) []Marker {
	owner := map[string]string{}
	var out []Marker
	for _, t := range tenants {
		for _, label := range markerLabels {
			for try := uint64(0); ; try++ {
				h := sha256.New()
				var b [16]byte
				binary.LittleEndian.PutUint64(b[:8], seed)
				binary.LittleEndian.PutUint64(b[8:], try)
				h.Write(b[:])
				h.Write([]byte("bulkhead-audit\x00" + t + "\x00" + label))
				m := Marker{Tenant: t, Label: label, Hex: hex.EncodeToString(h.Sum(nil))[:16]}
				ws := windows(m.Hex)
				if slices.ContainsFunc(ws, func(w string) bool { o, ok := owner[w]; return ok && o != t }) {
					continue
				}
				for _, w := range ws {
					owner[w] = t
				}
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// window is how many consecutive hex digits of a marker count as a leak.
const window = 8

// windows returns every window-long substring of s.
func windows(s string) []string {
	var out []string
	for i := 0; i+window <= len(s); i++ {
		out = append(out, s[i:i+window])
	}
	return out
}
