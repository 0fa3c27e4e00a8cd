package audit

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Status is a check's verdict, or a finding's weight. Higher is worse.
type Status int

const (
	// Pass: the check saw what it should.
	Pass Status = iota
	// Skip: the endpoint gives the check nothing to judge.
	Skip
	// Warn: something unexpected that is not a leak, or a response the
	// check could not judge.
	Warn
	// Fail: evidence of a leak or of the placeholder bug.
	Fail
)

var statusNames = [...]string{"PASS", "SKIP", "WARN", "FAIL"}

// String is the status as the reports print it: PASS, SKIP, WARN or FAIL.
func (s Status) String() string { return statusNames[s] }

// MarshalText writes the status as its name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// The checks, by ID.
const (
	// CheckOverLimit: prompts longer than the context are refused.
	CheckOverLimit = "over-limit"
	// CheckSoloEquivalence: probes under mixed traffic equal their solo
	// baselines, text and finish_reason.
	CheckSoloEquivalence = "solo-equivalence"
	// CheckCanaries: no response carries another tenant's marker.
	CheckCanaries = "canaries"
	// CheckErrorEcho: no error message repeats a prompt.
	CheckErrorEcho = "error-echo"
	// CheckPrefixCache: no tenant's first request reports cached tokens.
	CheckPrefixCache = "prefix-cache"
)

// Finding is one piece of evidence: which tenant, which request, what was
// expected and what came back (truncated).
type Finding struct {
	Status   Status `json:"status"`
	Tenant   string `json:"tenant"`
	Request  string `json:"request"`
	Expected string `json:"expected,omitempty"`
	Got      string `json:"got"`
	// Why says what the difference means.
	Why string `json:"why,omitempty"`
}

// maxFindings bounds the findings a check keeps; the rest are counted.
const maxFindings = 20

// Check is one check's verdict with its evidence.
type Check struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	Status   Status    `json:"status"`
	Summary  string    `json:"summary"`
	Findings []Finding `json:"findings,omitempty"`
	// Omitted counts findings beyond the ones kept.
	Omitted int `json:"omitted,omitempty"`
}

func (c *Check) add(f Finding) {
	c.Status = max(c.Status, f.Status)
	c.Findings = append(c.Findings, f)
}

// trim keeps the maxFindings most serious findings, in request order
// within each status, and counts the rest.
func (c *Check) trim() {
	slices.SortStableFunc(c.Findings, func(a, b Finding) int { return cmp.Compare(b.Status, a.Status) })
	if len(c.Findings) > maxFindings {
		c.Omitted = len(c.Findings) - maxFindings
		c.Findings = c.Findings[:maxFindings]
	}
}

// Report is the outcome of an audit.
type Report struct {
	// Target and Concurrency are filled in by the caller; Evaluate knows
	// only the plan.
	Target      string   `json:"target,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Model       string   `json:"model"`
	Tenants     []string `json:"tenants"`
	Seed        uint64   `json:"seed"`
	Rounds      int      `json:"rounds"`
	OverLength  int      `json:"over_limit_prompt_tokens"`
	// ContextLenSource is Config.ContextLenSource: where the context
	// length came from, when the operator did not give it.
	ContextLenSource string  `json:"context_len_source,omitempty"`
	Requests         int     `json:"requests"`
	Solo             int     `json:"solo_requests"`
	Checks           []Check `json:"checks"`
	// Status is the worst check's.
	Status Status `json:"status"`
}

// Failed lists the IDs of the checks that failed.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.ID)
		}
	}
	return out
}

// Evaluate judges results, one per request of p (results[i] answers
// p.Requests[i]; missing ones count as not sent).
func Evaluate(p *Plan, results []Result) Report {
	res := make([]Result, len(p.Requests))
	for i := range res {
		if i < len(results) && results[i].ID == i {
			res[i] = results[i]
		} else {
			res[i] = Result{ID: i, Transport: "not sent"}
		}
	}
	rep := Report{Model: p.Config.Model, Tenants: p.Config.Tenants, Seed: p.Config.Seed, Rounds: p.Config.Rounds,
		OverLength: p.OverLength, ContextLenSource: p.Config.ContextLenSource, Requests: len(p.Requests), Solo: p.SoloCount()}
	rep.Checks = []Check{
		checkOverLimit(p, res),
		checkSoloEquivalence(p, res),
		checkCanaries(p, res),
		checkErrorEcho(p, res),
		checkPrefixCache(p, res),
	}
	for i := range rep.Checks {
		rep.Checks[i].trim()
		rep.Status = max(rep.Status, rep.Checks[i].Status)
	}
	return rep
}

func checkSoloEquivalence(p *Plan, res []Result) Check {
	c := Check{ID: CheckSoloEquivalence, Title: "probes under mixed traffic equal their solo baselines"}
	base := map[string]*Result{}
	for i := range p.Requests {
		if q := &p.Requests[i]; q.Kind == Probe && q.Phase == Solo {
			base[q.Key()] = &res[i]
		}
	}
	// The shared probe is the same request for every tenant, so alone it
	// must get every tenant the same answer. A baseline that differs was
	// shaped by who sent it, or by what another tenant sent before, and
	// the same contamination under load would match it.
	ref := map[string]*Request{} // mode → the first tenant's shared probe
	across := 0
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		if q.Kind != Probe || q.Phase != Solo || q.Name != sharedProbe || !r.Complete {
			continue
		}
		mode := modeName(q.Endpoint, q.Stream)
		first, ok := ref[mode]
		if !ok {
			ref[mode] = q
			continue
		}
		across++
		if d, same := Compare(&res[first.ID], r); !same {
			c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(), Expected: fmt.Sprintf("%s's answer to the same request, alone (%s)", first.Tenant, first.String()), Got: d,
				Why: "the same greedy request, sent alone, gave two tenants different answers: the answer depends on who asks, or on what another tenant sent before"})
		}
	}
	compared, equal, notCompared := 0, 0, 0
	perMode := map[string]int{}
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		if q.Kind != Probe || q.Phase != Mixed {
			continue
		}
		b := base[q.Key()]
		switch {
		case b == nil || !b.Complete:
			notCompared++
			c.add(Finding{Status: Warn, Tenant: q.Tenant, Request: q.String(), Got: r.describe(), Why: "no complete solo baseline to compare with"})
			continue
		case !r.Complete:
			notCompared++
			c.add(Finding{Status: Warn, Tenant: q.Tenant, Request: q.String(), Expected: "a complete response", Got: r.describe(), Why: "not compared"})
			continue
		}
		compared++
		perMode[modeName(q.Endpoint, q.Stream)]++
		if d, same := Compare(b, r); !same {
			c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(), Expected: "the solo baseline, byte for byte", Got: d,
				Why: "the same greedy request gave a different answer under concurrent traffic from other tenants"})
			continue
		}
		equal++
	}
	var counts []string
	for _, md := range modes {
		m := modeName(md.ep, md.stream)
		counts = append(counts, fmt.Sprintf("%s %d", m, perMode[m]))
		if perMode[m] == 0 && compared > 0 {
			c.add(Finding{Status: Warn, Request: m, Got: "no probe of this kind completed under mixed traffic", Why: "that API was not compared"})
		}
	}
	c.Summary = fmt.Sprintf("%d of %d compared responses equal their baselines (%s)", equal, compared, strings.Join(counts, ", "))
	if notCompared > 0 {
		c.Summary += fmt.Sprintf("; %d not compared", notCompared)
	}
	if compared == 0 {
		c.Status = max(c.Status, Warn)
		c.Summary = "no probe completed under mixed traffic, so nothing was compared"
	}
	c.Summary += fmt.Sprintf("; %d baselines of %s, the same request for every tenant, compared with the first tenant's", across, sharedProbe)
	return c
}

// sharedProbe is the probe whose prompt is the same for every tenant.
const sharedProbe = "p1"

// modeName names a probe mode (plan.go's modes) in reports.
func modeName(ep Endpoint, stream bool) string {
	s := ep.short()
	if stream {
		s += " streamed"
	}
	return s
}

// Compare reports whether got equals the baseline: its text (every
// choice's), finish_reason, number of choices, and the prompt and
// completion token counts when both report usage. The cached token count
// is not compared: it depends on what ran before. When they differ,
// Compare describes the first difference.
func Compare(baseline, got *Result) (string, bool) {
	switch {
	case baseline.Text != got.Text:
		return firstDiff(got.Text, baseline.Text), false
	case baseline.Finish != got.Finish:
		return fmt.Sprintf("the same text, but finish_reason %q where the baseline had %q", got.Finish, baseline.Finish), false
	case baseline.Choices != got.Choices:
		return fmt.Sprintf("the same text, but %d choices where the baseline had %d", got.Choices, baseline.Choices), false
	case !baseline.UsageReported || !got.UsageReported:
		return "", true
	case baseline.PromptTokens != got.PromptTokens:
		return fmt.Sprintf("the same text, but usage.prompt_tokens %d where the baseline had %d: the prompt was not read the same way", got.PromptTokens, baseline.PromptTokens), false
	case baseline.CompletionTokens != got.CompletionTokens:
		return fmt.Sprintf("the same text, but usage.completion_tokens %d where the baseline had %d", got.CompletionTokens, baseline.CompletionTokens), false
	}
	return "", true
}

// firstDiff describes where got and want first differ, with some text
// around it from each.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	around := func(s string) string {
		lo, hi := max(0, i-24), min(len(s), i+40)
		return fmt.Sprintf("%q", strings.ToValidUTF8(s[lo:hi], "?"))
	}
	return fmt.Sprintf("first difference at byte %d: got %s, baseline %s", i, around(got), around(want))
}

// scanned are the parts of a response that reach its tenant: its text
// (the chunks of a stream joined), its error, and everything else the body
// carried (Result.Content).
func scanned(r *Result) []string {
	return []string{r.Text, r.ErrorMessage, r.Unparsed, r.Content}
}

// markerIndex maps every window of every marker to its marker.
func markerIndex(p *Plan) map[string]Marker {
	idx := map[string]Marker{}
	for _, m := range p.Markers {
		for _, w := range windows(m.Hex) {
			idx[w] = m
		}
	}
	return idx
}

// FindMarkers returns the markers of idx that s contains a window of, with
// the text around the first hit of each, in order of appearance.
func FindMarkers(idx map[string]Marker, s string) []Hit {
	// Only ASCII letters are folded: hex digits are ASCII, and folding
	// nothing else keeps every byte where it was in s, whatever else s
	// holds (invalid UTF-8 would otherwise grow, and some letters shrink).
	low := []byte(s)
	for i, b := range low {
		if 'A' <= b && b <= 'Z' {
			low[i] = b + 'a' - 'A'
		}
	}
	var out []Hit
	seen := map[Marker]bool{}
	for i := 0; i+window <= len(low); i++ {
		m, ok := idx[string(low[i:i+window])]
		if !ok || seen[m] {
			continue
		}
		seen[m] = true
		lo, hi := max(0, i-30), min(len(s), i+window+30)
		out = append(out, Hit{Marker: m, Context: strings.ToValidUTF8(s[lo:hi], "?")})
	}
	return out
}

// Hit is a marker found in a response.
type Hit struct {
	Marker  Marker
	Context string // the response text around it
}

func checkCanaries(p *Plan, res []Result) Check {
	c := Check{ID: CheckCanaries, Title: "no tenant receives another tenant's canary or API key"}
	idx := markerIndex(p)
	echoedToOwner, scannedN, answered, canaries := 0, 0, 0, 0
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		if q.Kind == Canary {
			canaries++
			if r.OK() {
				answered++
			}
		}
		own, searched := false, false
		found := map[Marker]bool{}
		for _, s := range scanned(r) {
			if s == "" {
				continue
			}
			searched = true
			for _, t := range p.Config.Tenants {
				key := Marker{Tenant: t, Label: "api key"}
				if t != q.Tenant && !found[key] && strings.Contains(s, KeyPlaceholder(t)) {
					found[key] = true
					c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(),
						Expected: fmt.Sprintf("nothing of %s's", t),
						Got:      fmt.Sprintf("%s's API key (shown as %s)", t, KeyPlaceholder(t)),
						Why:      fmt.Sprintf("%s's API key reached %s's response", t, q.Tenant)})
				}
			}
			for _, h := range FindMarkers(idx, s) {
				if h.Marker.Tenant == q.Tenant {
					own = true
					continue
				}
				if found[h.Marker] {
					continue // the same marker in another part of the body
				}
				found[h.Marker] = true
				c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(),
					Expected: fmt.Sprintf("nothing of %s's markers", h.Marker.Tenant),
					Got:      fmt.Sprintf("%q, which holds part of %s's marker %s (%s)", h.Context, h.Marker.Tenant, h.Marker.Label, h.Marker.Word()),
					Why:      fmt.Sprintf("%s's prompt reached %s's response", h.Marker.Tenant, q.Tenant)})
			}
		}
		if searched {
			scannedN++
		}
		if r.Truncated {
			c.add(Finding{Status: Warn, Tenant: q.Tenant, Request: q.String(), Expected: "a body the audit reads whole",
				Got: r.describe(), Why: "the body was longer than the audit reads: only part of it was searched"})
		}
		if r.Undecodable != "" {
			c.add(Finding{Status: Warn, Tenant: q.Tenant, Request: q.String(), Expected: "a body the audit can decode",
				Got: r.describe(), Why: fmt.Sprintf("the body came with content coding %s, which the audit cannot decode: it was not searched", r.Undecodable)})
		}
		if own {
			echoedToOwner++
		}
	}
	c.Summary = fmt.Sprintf("%d of %d canary prompts answered; %d responses searched, every part of each body, for any %d-digit piece of another tenant's %d markers",
		answered, canaries, scannedN, window, len(p.Markers))
	if echoedToOwner > 0 {
		c.Summary += fmt.Sprintf("; the model repeated its own tenant's marker in %d responses, which is allowed", echoedToOwner)
	}
	if answered == 0 {
		// No canary reached the model, so no marker could have leaked:
		// nothing was tested.
		c.add(Finding{Status: Warn, Request: "every canary request", Expected: "canary prompts answered, so that their markers are in the server's memory",
			Got: "none was answered with a 2xx", Why: "no marker was planted, so the search shows nothing"})
	}
	return c
}

// echoLen is the length of a piece of a prompt that, found in an error
// message, counts as an echo.
const echoLen = 40

func checkErrorEcho(p *Plan, res []Result) Check {
	c := Check{ID: CheckErrorEcho, Title: "no error message echoes a prompt"}
	idx := markerIndex(p)
	memo := map[string]string{}
	n := 0
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		// Everything the error carried: its message, its other fields,
		// the whole body of a non-2xx response.
		msg := r.ErrorContent
		if msg == "" {
			msg = r.ErrorMessage
		}
		if msg == "" && r.Refused() {
			msg = r.Unparsed
		}
		if msg == "" {
			continue
		}
		n++
		hits := FindMarkers(idx, msg)
		for _, h := range hits {
			whose := "its own prompt's"
			if h.Marker.Tenant != q.Tenant {
				whose = h.Marker.Tenant + "'s"
			}
			c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(), Expected: "an error message without prompt text",
				Got: quote(msg, 200), Why: fmt.Sprintf("the error message holds part of %s marker %s", whose, h.Marker.Word())})
		}
		if len(hits) > 0 {
			continue // one finding per message is enough
		}
		key := q.Key() + "\x00" + msg
		piece, ok := memo[key]
		if !ok {
			piece = EchoedPiece(q.PromptText(), msg)
			memo[key] = piece
		}
		if piece != "" {
			c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(), Expected: "an error message without prompt text",
				Got: quote(msg, 200), Why: fmt.Sprintf("the error message repeats %d bytes of the prompt: %q", echoLen, piece)})
		}
	}
	c.Summary = fmt.Sprintf("%d error messages searched for markers and for any %d bytes of their request's prompt", n, echoLen)
	if n == 0 {
		c.Status, c.Summary = Skip, "no request got an error message, so there was nothing to search"
	}
	return c
}

// EchoedPiece returns the first echoLen-byte piece of msg that also
// appears in prompt, or "".
func EchoedPiece(prompt, msg string) string {
	if len(prompt) < echoLen || len(msg) < echoLen {
		return ""
	}
	msg = msg[:min(len(msg), 8<<10)]
	pieces := map[string]bool{}
	for i := 0; i+echoLen <= len(msg); i++ {
		pieces[msg[i:i+echoLen]] = true
	}
	for i := 0; i+echoLen <= len(prompt); i++ {
		if w := prompt[i : i+echoLen]; pieces[w] {
			return w
		}
	}
	return ""
}

// crossTenantMin is the number of cached tokens on a tenant's first
// request that counts as a hit on another tenant's prefix. Below it, the
// hit can be the BOS token and the first characters of the nonce, which
// this tenant's earlier traffic may share.
const crossTenantMin = 8

func checkPrefixCache(p *Plan, res []Result) Check {
	c := Check{ID: CheckPrefixCache, Title: "no prefix-cache hit crosses tenants"}
	reported, small, repeats, repeatHits := 0, 0, 0, 0
	var before []string // the tenants whose first contact came earlier
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		if q.Phase == Solo && q.Kind == Probe && q.Name == "p0" && !q.FirstContact && r.CachedReported {
			repeats++
			if r.CachedTokens > 0 {
				repeatHits++
			}
		}
		if !q.FirstContact {
			continue
		}
		if r.CachedReported {
			reported++
			switch {
			case r.CachedTokens >= crossTenantMin:
				why := "a hit on a prefix that nobody sent before in this audit (it starts with a fresh nonce)"
				if len(before) > 0 {
					why = fmt.Sprintf("this tenant had sent nothing yet; only %s had sent this prefix, in the request(s) just before", strings.Join(before, ", "))
				}
				c.add(Finding{Status: Fail, Tenant: q.Tenant, Request: q.String(), Expected: fmt.Sprintf("fewer than %d cached prompt tokens on the tenant's first request", crossTenantMin),
					Got: fmt.Sprintf("usage.prompt_tokens_details.cached_tokens = %d", r.CachedTokens), Why: why})
			case r.CachedTokens > 0:
				small++
			}
		}
		before = append(before, q.Tenant)
	}
	c.Summary = fmt.Sprintf("%d of %d tenants' first requests reported usage.prompt_tokens_details.cached_tokens; none may reach %d on a prefix only other tenants sent", reported, len(p.Config.Tenants), crossTenantMin)
	if small > 0 {
		c.Summary += fmt.Sprintf(" (%d reported 1 to %d: at most the prompt's first tokens, which earlier traffic can share)", small, crossTenantMin-1)
	}
	switch {
	case reported == 0:
		c.Status = max(c.Status, Skip)
		c.Summary = "the endpoint reports no usage.prompt_tokens_details.cached_tokens, so prefix-cache hits are not observable"
	case repeatHits > 0:
		c.Summary += fmt.Sprintf("; the same tenant's repeats hit the cache in %d of %d responses, so hits are visible", repeatHits, repeats)
	default:
		// Nothing shows that a hit would be visible at all: zeros judge
		// nothing.
		c.Status = max(c.Status, Skip)
		c.Summary += "; no repeat by the same tenant hit the cache either, not even one: the endpoint may not cache prefixes, or not report its hits, so the check saw nothing to judge"
	}
	return c
}
