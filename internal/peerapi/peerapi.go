// Package peerapi is the control protocol between a router and its
// prefill and decode servers: paths, request and response bodies, and the
// error encoding that carries an errkind.Error across a hop unchanged, so
// the client gets the first real error with its original status.
//
// It owns the wire vocabulary only. It must never carry KV (that is the
// transfer protocol's job, on its own authenticated connection) and never
// let a client-supplied value become a transfer ID.
package peerapi

import (
	"encoding/json"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// Protocol is the version of the peer protocols, control and KV transfer
// together; peers with different versions refuse each other at
// handshake. 2: OPEN carries the sender's window.
const Protocol = 2

// Paths served by prefill and decode servers. Every request must carry the
// peer credentials: mutual TLS with a role per certificate, or TLS 1.3
// keyed by the pre-shared key.
const (
	PathInfo     = "/peer/v1/info"     // GET: Info
	PathPrefill  = "/peer/v1/prefill"  // POST PrefillRequest -> PrefillResult (prefill servers)
	PathGenerate = "/peer/v1/generate" // POST GenerateRequest -> NDJSON stream of Event (decode servers)
	PathCancel   = "/peer/v1/cancel"   // POST CancelRequest -> CancelResult (both)
	PathExpect   = "/peer/v1/expect"   // POST ExpectRequest -> ExpectResult, or 409 with an error (decode servers)
)

// HeaderIdempotencyKey marks a control request that may be sent twice
// with the same effect as once. Peers do not read it: it is for the
// router's HTTP client, whose transport re-sends such a request on a fresh
// connection when the kept-alive one it was written on turns out closed
// (a peer restarted at the same address, or closed an idle connection)
// before any byte of the answer came, instead of failing it. The router
// sets it to the transfer id on PathPrefill, PathCancel and PathExpect,
// each of which the peer answers the same way for a second copy, or
// refuses without harm (see the router's post); never on PathGenerate,
// whose second copy decode refuses as a replayed id once the first
// reserved (the router retries a lost reservation itself, under a fresh
// id). GETs are replayable without it.
const HeaderIdempotencyKey = "Idempotency-Key"

// Info is what a peer says about itself at handshake and on health checks.
type Info struct {
	Role     string `json:"role"` // "prefill" or "decode"
	Protocol int    `json:"protocol"`
	Model    string `json:"model"`
	// Fingerprint is model.Model.Fingerprint(): KV from one model is
	// garbage to another, so a pair whose fingerprints differ is refused.
	Fingerprint string `json:"fingerprint"`
	Layers      int    `json:"layers"`
	KVDim       int    `json:"kv_dim"`
	// KVType is the cache's element type ("f32" or "f16"): the transfer
	// moves the cache's bytes as they are, so both sides must agree.
	KVType   string `json:"kv_type"`
	PageSize int    `json:"page_size"`
	// Limits are this peer's own admission limits; a pair's effective
	// limits are the minimum of both (engine.Limits.Min).
	Limits engine.Limits `json:"limits"`
	// TenantTokens are the tenants whose KV page quota (max_kv_pages)
	// bounds one request below Limits, each with the most tokens, prompt
	// plus generated, one of its requests can hold here. The router sizes
	// a request that sends no max_tokens to the smallest over the peers.
	TenantTokens map[string]int `json:"tenant_tokens,omitempty"`
	// KVAddr is where a decode server accepts KV transfer connections.
	KVAddr string `json:"kv_addr,omitempty"`
	// Load is the peer's current load, for least-loaded pairing.
	Load Load `json:"load"`
}

// Load is a peer's current work.
type Load struct {
	Running   int `json:"running"`
	Queued    int `json:"queued"`
	FreePages int `json:"free_pages"`
	Transfers int `json:"transfers"` // KV transfers in progress
}

// Sampling mirrors sample.Params on the wire. Prefill draws a request's
// first token and decode the rest, so both must read every field: peers
// refuse a control request with a field they do not know (readJSON), and
// a router newer than its peers fails such a request rather than have it
// sampled without the settings the client sent.
type Sampling struct {
	Temperature      float32 `json:"temperature"`
	TopK             int     `json:"top_k"`
	TopP             float32 `json:"top_p"`
	Seed             uint64  `json:"seed"`
	PresencePenalty  float32 `json:"presence_penalty,omitempty"`
	FrequencyPenalty float32 `json:"frequency_penalty,omitempty"`
	LogitBias        []Bias  `json:"logit_bias,omitempty"`
	Logprobs         bool    `json:"logprobs,omitempty"`
	TopLogprobs      int     `json:"top_logprobs,omitempty"`
}

// Bias is one entry of Sampling.LogitBias (sample.Bias).
type Bias struct {
	Token int     `json:"token"`
	Bias  float32 `json:"bias"`
}

// Params converts to sample.Params.
func (s Sampling) Params() sample.Params {
	p := sample.Params{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, Seed: s.Seed,
		PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
		Logprobs: s.Logprobs, TopLogprobs: s.TopLogprobs}
	for _, b := range s.LogitBias {
		p.LogitBias = append(p.LogitBias, sample.Bias{Token: b.Token, Bias: b.Bias})
	}
	return p
}

// FromParams converts from sample.Params.
func FromParams(p sample.Params) Sampling {
	s := Sampling{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, Seed: p.Seed,
		PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty,
		Logprobs: p.Logprobs, TopLogprobs: p.TopLogprobs}
	for _, b := range p.LogitBias {
		s.LogitBias = append(s.LogitBias, Bias{Token: b.Token, Bias: b.Bias})
	}
	return s
}

// GenerateRequest asks a decode server to reserve KV pages for exactly
// len(Prompt)+MaxTokens tokens under transfer ID (a hex 128-bit random id
// the router generated), wait for the prefill server's KV transfer to
// complete and verify, then decode. The response is a stream of Events,
// one JSON object per line; closing the connection cancels the request.
type GenerateRequest struct {
	ID        string   `json:"id"`
	Tenant    string   `json:"tenant"`
	Prompt    []int    `json:"prompt"`
	MaxTokens int      `json:"max_tokens"`
	Sampling  Sampling `json:"sampling"`
	// PrefillIdentity names the prefill server the router chose to send
	// this transfer's KV (64 hex digits: peerauth.KeyIdentity of its
	// certificate, as transfer.Identity.String writes it). Decode takes
	// the transfer's frames only from a KV connection that presents it,
	// so that another prefill that learnt the id can neither open nor
	// fail the reservation. The router always sends it over TLS; empty
	// (a router without the binding) lets any prefill connection open
	// the transfer.
	PrefillIdentity string `json:"prefill_identity,omitempty"`
}

// ExpectRequest names another prefill server for transfer ID: the router
// moves a prefill leg that provably never started (its server could not
// be reached, or refused the prompt before computing anything) to another
// server under the same reservation, or its prefill call went out on a
// connection that presents another key than the reservation names.
// Decode refuses it (409) once a prefill opened the transfer, and (400)
// for the all-zero identity, which names no one and would let any
// prefill that learnt the id open it.
type ExpectRequest struct {
	ID              string `json:"id"`
	PrefillIdentity string `json:"prefill_identity"`
}

// ExpectResult acknowledges an ExpectRequest.
type ExpectResult struct {
	OK bool `json:"ok"`
}

// PrefillRequest asks a prefill server to run its own admission, compute
// the prompt's KV and first token, and transfer them to the decode server
// listening at DecodeKVAddr under ID. It answers once the decode server
// acknowledged (or the transfer failed).
type PrefillRequest struct {
	ID           string   `json:"id"`
	Tenant       string   `json:"tenant"`
	Prompt       []int    `json:"prompt"`
	MaxTokens    int      `json:"max_tokens"`
	Sampling     Sampling `json:"sampling"`
	DecodeKVAddr string   `json:"decode_kv_addr"`
}

// PrefillResult is the prefill server's answer.
type PrefillResult struct {
	OK         bool  `json:"ok"`
	FirstToken int   `json:"first_token"`
	BytesSent  int64 `json:"bytes_sent"`
	// FirstLogprobs is the first token's log probabilities, when the
	// request asked for them: decode, which emits the token, cannot know
	// them (the prompt's last logits stay on the prefill server).
	FirstLogprobs *Logprobs `json:"first_logprobs,omitempty"`
	Error         *Error    `json:"error,omitempty"`
}

// Logprobs is sample.Logprobs on the wire.
type Logprobs struct {
	Token   int            `json:"token"`
	Logprob Float          `json:"logprob"`
	Top     []TokenLogprob `json:"top,omitempty"`
}

// TokenLogprob is sample.TokenLogprob on the wire.
type TokenLogprob struct {
	Token   int   `json:"token"`
	Logprob Float `json:"logprob"`
}

// Float is a float32 that crosses JSON whole: NaN and the infinities,
// which JSON numbers cannot carry (a log probability of a masked token is
// -Inf), go as the strings "NaN", "+Inf" and "-Inf". Without it a peer's
// answer would fail to encode where serve answers the same request.
type Float float32

// MarshalJSON writes f as a number, or as a string when it is not finite.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(float32(f))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *Float) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*f = Float(math.NaN())
	case `"+Inf"`:
		*f = Float(math.Inf(1))
	case `"-Inf"`:
		*f = Float(math.Inf(-1))
	default:
		var v float32
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*f = Float(v)
	}
	return nil
}

// FromLogprobs encodes lp for the wire; nil stays nil.
func FromLogprobs(lp *sample.Logprobs) *Logprobs {
	if lp == nil {
		return nil
	}
	w := &Logprobs{Token: lp.Token, Logprob: Float(lp.Logprob)}
	for _, t := range lp.Top {
		w.Top = append(w.Top, TokenLogprob{Token: t.Token, Logprob: Float(t.Logprob)})
	}
	return w
}

// Sample decodes w; nil stays nil.
func (w *Logprobs) Sample() *sample.Logprobs {
	if w == nil {
		return nil
	}
	lp := &sample.Logprobs{Token: w.Token, Logprob: float32(w.Logprob)}
	for _, t := range w.Top {
		lp.Top = append(lp.Top, sample.TokenLogprob{Token: t.Token, Logprob: float32(t.Logprob)})
	}
	return lp
}

// CancelRequest cancels transfer ID wherever it stands. Cancels are
// acknowledged, and idempotent: cancelling an unknown or finished id
// answers Known=false.
type CancelRequest struct {
	ID string `json:"id"`
}

// CancelResult acknowledges a cancel.
type CancelResult struct {
	Known bool `json:"known"`
}

// Event types of a generate stream.
const (
	EventReserved = "reserved" // pages reserved; the prefill may start
	EventReady    = "ready"    // KV verified; decoding started
	EventTokens   = "tokens"   // generated tokens
	EventDone     = "done"     // success: Finish and Usage set
	EventError    = "error"    // failure: Error set (also for a refused reservation)
)

// Event is one line of a generate stream.
type Event struct {
	Type   string `json:"type"`
	Tokens []int  `json:"tokens,omitempty"`
	// Logprobs are the tokens' log probabilities, entry for entry, when
	// the request asked for them; null for the first token, which the
	// prefill server drew (PrefillResult.FirstLogprobs has it).
	Logprobs []*Logprobs         `json:"logprobs,omitempty"`
	Finish   engine.FinishReason `json:"finish,omitempty"`
	Usage    *engine.Usage       `json:"usage,omitempty"`
	Error    *Error              `json:"error,omitempty"`
}

// Error is an errkind.Error on the wire.
type Error struct {
	Kind    string `json:"kind"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// FromError encodes err (classified or not) for the wire. Only the
// client-safe message travels.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	e := errkind.Of(err)
	return &Error{Kind: e.Kind.String(), Code: e.Code, Message: e.Message, Param: e.Param}
}

// Err decodes the wire error back into an errkind.Error with the same
// kind, so the router answers with the status the original failure had.
func (e *Error) Err() *errkind.Error {
	if e == nil {
		return nil
	}
	k := errkind.Internal
	for c := errkind.Internal; c <= errkind.NotFound; c++ {
		if c.String() == e.Kind {
			k = c
		}
	}
	return &errkind.Error{Kind: k, Code: e.Code, Message: e.Message, Param: e.Param}
}
