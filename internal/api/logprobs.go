package api

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// maxCompletionLogprobs is OpenAI's limit on /v1/completions' logprobs.
const maxCompletionLogprobs = 5

// minLogprob stands for a log probability of -Inf, which JSON cannot
// carry: OpenAI (and vLLM) write -9999.
const minLogprob = -9999

// tokenEntry is one generated token's log probabilities, waiting for the
// chunk that carries its text.
type tokenEntry struct {
	lp *sample.Logprobs
	// offset is the number of characters (code points) the decoder had
	// emitted before this token: the token's text_offset in the
	// completion.
	offset int
}

// entryOf checks the i-th log probabilities the backend gave with token
// tok (lps may be nil when it gave none). A request that asked for
// them fails rather than show a number that is not the model's.
func entryOf(lps []*sample.Logprobs, i, tok int) (*sample.Logprobs, *errkind.Error) {
	if i >= len(lps) || lps[i] == nil {
		return nil, errkind.New(errkind.Internal, "logprobs_unavailable", "the engine gave no log probabilities for generated token %d", tok)
	}
	lp := lps[i]
	if lp.Token != tok {
		return nil, errkind.New(errkind.Internal, "logprobs_unavailable", "the engine gave log probabilities of token %d for generated token %d", lp.Token, tok)
	}
	bad := invalidLogprob(lp.Logprob)
	for _, t := range lp.Top {
		bad = bad || invalidLogprob(t.Logprob)
	}
	if bad {
		return nil, errkind.New(errkind.Internal, "logprobs_unavailable", "the engine gave an invalid log probability (NaN or +Inf) with generated token %d", tok)
	}
	return lp, nil
}

// logprobsFormat writes tokens' log probabilities in an endpoint's shape.
// The zero value (off) writes null.
type logprobsFormat struct {
	on     bool
	top    int // alternatives per token
	isChat bool
	tok    *tokenizer.Tokenizer
}

// render is the choice's logprobs value for entries: nil (null) when the
// request did not ask for them.
func (f logprobsFormat) render(entries []tokenEntry) any {
	if !f.on {
		return nil
	}
	if f.isChat {
		return f.chat(entries)
	}
	return f.completion(entries)
}

// chatLogprobs is ChatCompletion's choices[].logprobs.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"` // always null: no refusals
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func (f logprobsFormat) chat(entries []tokenEntry) *chatLogprobs {
	out := &chatLogprobs{Content: make([]chatTokenLogprob, len(entries))}
	for i, e := range entries {
		top := f.topOf(e.lp)
		c := chatTokenLogprob{Token: f.text(e.lp.Token), Logprob: finite(e.lp.Logprob), Bytes: f.bytes(e.lp.Token),
			TopLogprobs: make([]chatTopLogprob, len(top))}
		for k, t := range top {
			c.TopLogprobs[k] = chatTopLogprob{Token: f.text(t.Token), Logprob: finite(t.Logprob), Bytes: f.bytes(t.Token)}
		}
		out.Content[i] = c
	}
	return out
}

// completionLogprobs is the legacy Completion's choices[].logprobs.
type completionLogprobs struct {
	Tokens        []string          `json:"tokens"`
	TokenLogprobs []float32         `json:"token_logprobs"`
	TopLogprobs   []orderedLogprobs `json:"top_logprobs"`
	TextOffset    []int             `json:"text_offset"`
}

func (f logprobsFormat) completion(entries []tokenEntry) *completionLogprobs {
	n := len(entries)
	out := &completionLogprobs{Tokens: make([]string, n), TokenLogprobs: make([]float32, n),
		TopLogprobs: make([]orderedLogprobs, n), TextOffset: make([]int, n)}
	for i, e := range entries {
		out.Tokens[i] = f.text(e.lp.Token)
		out.TokenLogprobs[i] = finite(e.lp.Logprob)
		out.TextOffset[i] = e.offset
		// As OpenAI: the sampled token is always there, so an object has
		// up to logprobs+1 names; as vLLM, it comes first.
		top := f.topOf(e.lp)
		o := make([]sample.TokenLogprob, 0, len(top)+1)
		o = append(o, sample.TokenLogprob{Token: e.lp.Token, Logprob: e.lp.Logprob})
		o = append(o, top...)
		out.TopLogprobs[i] = f.named(o)
	}
	return out
}

// orderedLogprobs is one top_logprobs object of the legacy format, written
// in its order (a Go map would sort the names).
type orderedLogprobs []namedLogprob

type namedLogprob struct {
	name    string
	logprob float32
}

// named turns token ids into names. Different tokens can share a name
// (invalid UTF-8 shows as U+FFFD, a byte token and a piece can spell the
// same text); an object cannot hold a name twice, so the first, which is
// the sampled token or the likelier one, stays.
func (f logprobsFormat) named(lps []sample.TokenLogprob) orderedLogprobs {
	out := make(orderedLogprobs, 0, len(lps))
	seen := make(map[string]bool, len(lps))
	for _, t := range lps {
		name := f.tok.PieceText(t.Token)
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, namedLogprob{name: name, logprob: finite(t.Logprob)})
	}
	return out
}

// MarshalJSON writes the object with its names in order.
func (o orderedLogprobs) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(n.name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(n.logprob)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// topOf is lp's alternatives, no more than the request asked for.
func (f logprobsFormat) topOf(lp *sample.Logprobs) []sample.TokenLogprob {
	return lp.Top[:min(len(lp.Top), f.top)]
}

// text is a token's text: its raw bytes, with each byte that is not part
// of valid UTF-8 shown as U+FFFD (the bytes field has the truth).
func (f logprobsFormat) text(id int) string { return f.tok.PieceText(id) }

// bytes is a token's raw bytes as JSON numbers (a []byte would be
// written as base64). Never nil: an empty token has [].
func (f logprobsFormat) bytes(id int) []int {
	p := f.tok.Piece(id)
	out := make([]int, len(p))
	for i, c := range p {
		out[i] = int(c)
	}
	return out
}

// invalidLogprob is a value no model's log-softmax gives, and JSON cannot
// carry: NaN or +Inf (-Inf is a probability of 0, written as minLogprob).
func invalidLogprob(v float32) bool {
	return math.IsNaN(float64(v)) || math.IsInf(float64(v), 1)
}

// finite replaces -Inf (a token the model rules out) with minLogprob.
func finite(v float32) float32 {
	if math.IsInf(float64(v), -1) {
		return minLogprob
	}
	return v
}
