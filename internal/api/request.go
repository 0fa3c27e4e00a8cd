package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/chat"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// maxStops is OpenAI's limit on stop sequences.
const maxStops = 4

// commonParams are the fields /v1/completions and /v1/chat/completions
// share. Pointers distinguish "absent" from a zero value.
type commonParams struct {
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	TopK                *int               `json:"top_k"`
	Seed                *int64             `json:"seed"`
	Stop                json.RawMessage    `json:"stop"`
	N                   *int               `json:"n"`
	Stream              *bool              `json:"stream"`
	StreamOptions       *streamOptions     `json:"stream_options"`
	User                string             `json:"user"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	LogitBias           map[string]float64 `json:"logit_bias"`
	// Accepted and ignored. prompt_cache_key in particular never selects a
	// prefix-cache namespace: that comes from the API key alone.
	Store            *bool             `json:"store"`
	Metadata         map[string]string `json:"metadata"`
	SafetyIdentifier string            `json:"safety_identifier"`
	PromptCacheKey   string            `json:"prompt_cache_key"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// IncludeObfuscation is accepted and ignored: chunks are not padded.
	IncludeObfuscation *bool `json:"include_obfuscation"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	commonParams
	Echo     *bool   `json:"echo"`
	Suffix   *string `json:"suffix"`
	BestOf   *int    `json:"best_of"`
	Logprobs *int    `json:"logprobs"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	commonParams
	Logprobs          *bool           `json:"logprobs"`
	TopLogprobs       *int            `json:"top_logprobs"`
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ResponseFormat    *responseFormat `json:"response_format"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

type chatMessage struct {
	Role    string         `json:"role"`
	Content messageContent `json:"content"`
	Name    string         `json:"name"`
}

// contentPart is one part of a message's content. Only text parts are
// supported; the other kinds' fields are named so that such a part is
// refused for its type, not for an unknown field.
type contentPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ImageURL   json.RawMessage `json:"image_url"`
	InputAudio json.RawMessage `json:"input_audio"`
	File       json.RawMessage `json:"file"`
}

// responseFormat is OpenAI's response_format. Only type "text" is
// supported; json_schema is described so that its unknown fields are
// named by path. The schema itself is the client's and is not read.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// genParams are validated generation settings.
type genParams struct {
	maxTokens    int // 0: as many as the context allows
	sampling     sample.Params
	stop         []string
	stream       bool
	includeUsage bool
}

// decodeBody reads one JSON object into v, strictly: unknown fields
// (including known names in another case, which encoding/json alone would
// accept), wrong types, trailing data and oversized bodies are BadInput
// errors that name the field by its full path where they can.
func decodeBody(body io.Reader, v any) *errkind.Error {
	data, err := io.ReadAll(body)
	if err != nil {
		return jsonError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // the field check below is stricter still
	derr := dec.Decode(v)
	var syn *json.SyntaxError
	if derr != nil && (errors.As(derr, &syn) || errors.Is(derr, io.EOF) || errors.Is(derr, io.ErrUnexpectedEOF)) {
		return jsonError(derr)
	}
	// The decoder has read and checked the whole value, even if a field
	// had the wrong type, so data up to its offset is valid JSON, as the
	// field check needs. An unknown field is reported before a type error.
	if err := checkFields(data[:dec.InputOffset()], shapeFor(v)); err != nil {
		return err
	}
	if derr != nil {
		return jsonError(derr)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badInput("", "invalid_json", "the request body has data after its JSON object")
	}
	return nil
}

func jsonError(err error) *errkind.Error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return badInput("", codeTooLarge, "the request body is larger than this server's limit of %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return badInput("", "invalid_json", "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badInput("", "invalid_json", "the request body is truncated JSON")
	case errors.As(err, &syn):
		return badInput("", "invalid_json", "the request body is not valid JSON (at byte %d): %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badInput("", "invalid_type", "the request body must be a JSON object, not %s", typ.Value)
		}
		// Fields of the embedded commonParams come prefixed with its Go name.
		field := strings.TrimPrefix(typ.Field, "commonParams.")
		return badInput(field, "invalid_type", "%s must be %s, not %s", field, jsonType(typ.Type), typ.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		f = strings.Trim(f, `"`)
		return badInput(f, "unknown_parameter", "unknown parameter %q; see docs/api.md for the supported fields", f)
	}
	return badInput("", "invalid_json", "the request body could not be decoded: %s", msg)
}

// jsonType names a Go type as the JSON type a client must send.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// resolve validates the shared fields, for a model of vocab tokens.
func (p *commonParams) resolve(vocab int) (genParams, *errkind.Error) {
	var g genParams
	if p.N != nil && *p.N != 1 {
		return g, badInput("n", "unsupported_value", "n must be 1; this server returns one choice per request")
	}
	for _, pen := range []struct {
		name string
		v    *float64
		to   *float32
	}{{"presence_penalty", p.PresencePenalty, &g.sampling.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty, &g.sampling.FrequencyPenalty}} {
		if pen.v == nil {
			continue
		}
		if !(*pen.v >= -2 && *pen.v <= 2) {
			return g, badInput(pen.name, "invalid_value", "%s is %v; it must be between -2 and 2", pen.name, *pen.v)
		}
		*pen.to = float32(*pen.v)
	}
	bias, err := parseLogitBias(p.LogitBias, vocab)
	if err != nil {
		return g, err
	}
	g.sampling.LogitBias = bias
	if p.MaxTokens != nil && p.MaxCompletionTokens != nil && *p.MaxTokens != *p.MaxCompletionTokens {
		return g, badInput("max_completion_tokens", "invalid_value", "max_tokens (%d) and max_completion_tokens (%d) disagree; send one", *p.MaxTokens, *p.MaxCompletionTokens)
	}
	for _, mt := range []struct {
		name string
		v    *int
	}{{"max_tokens", p.MaxTokens}, {"max_completion_tokens", p.MaxCompletionTokens}} {
		if mt.v == nil {
			continue
		}
		if *mt.v < 1 {
			return g, badInput(mt.name, "invalid_value", "%s is %d; it must be at least 1", mt.name, *mt.v)
		}
		g.maxTokens = *mt.v
	}
	g.sampling.Temperature = 1 // OpenAI's default
	if t := p.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return g, badInput("temperature", "invalid_value", "temperature is %v; it must be between 0 and 2", *t)
		}
		g.sampling.Temperature = float32(*t)
	}
	if tp := p.TopP; tp != nil {
		if math.IsNaN(*tp) || *tp <= 0 || *tp > 1 {
			return g, badInput("top_p", "invalid_value", "top_p is %v; it must be greater than 0 and at most 1", *tp)
		}
		// At least the smallest float32: a top_p that rounds to 0 would
		// mean "off" to the sampler instead of "the top token".
		g.sampling.TopP = max(float32(*tp), math.SmallestNonzeroFloat32)
	}
	if k := p.TopK; k != nil {
		switch {
		case *k == -1: // vLLM's spelling of "off"
		case *k < 0:
			return g, badInput("top_k", "invalid_value", "top_k is %d; it must be 0 or -1 (off) or positive", *k)
		default:
			g.sampling.TopK = *k
		}
	}
	if p.Seed != nil {
		g.sampling.Seed = uint64(*p.Seed)
	} else {
		g.sampling.Seed = rand.Uint64()
	}
	stop, err := parseStop(p.Stop)
	if err != nil {
		return g, err
	}
	g.stop = stop
	g.stream = p.Stream != nil && *p.Stream
	if p.StreamOptions != nil {
		if !g.stream {
			return g, badInput("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
		}
		g.includeUsage = p.StreamOptions.IncludeUsage
	}
	return g, nil
}

// parseLogitBias reads OpenAI's logit_bias, token ids in decimal mapped
// to a bias from -100 to 100, into the sampler's list in order of token.
func parseLogitBias(m map[string]float64, vocab int) ([]sample.Bias, *errkind.Error) {
	if len(m) == 0 {
		return nil, nil
	}
	bias := make([]sample.Bias, 0, len(m))
	for _, key := range slices.Sorted(maps.Keys(m)) { // the same error for the same body
		v := m[key]
		id, err := strconv.Atoi(key)
		if err != nil || id < 0 || id >= vocab || strconv.Itoa(id) != key {
			return nil, badInput("logit_bias", "invalid_value", "logit_bias key %q is not a token id of this model (0 to %d)", clipKey(key), vocab-1)
		}
		if !(v >= -100 && v <= 100) {
			return nil, badInput("logit_bias", "invalid_value", "logit_bias of token %d is %v; it must be between -100 and 100", id, v)
		}
		bias = append(bias, sample.Bias{Token: id, Bias: float32(v)})
	}
	slices.SortFunc(bias, func(a, b sample.Bias) int { return a.Token - b.Token })
	return bias, nil
}

// clipKey cuts a client's key for an error message.
func clipKey(k string) string {
	if len(k) > 32 {
		return k[:32] + "..."
	}
	return k
}

// parseStop accepts null, a string or an array of up to four strings.
func parseStop(raw json.RawMessage) ([]string, *errkind.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		return nil, badInput("stop", "invalid_type", "stop must be a string or an array of strings")
	}
	if len(list) > maxStops {
		return nil, badInput("stop", "invalid_value", "stop has %d sequences; at most %d are allowed", len(list), maxStops)
	}
	var out []string
	for i, s := range list {
		if s == "" {
			return nil, badInput(fmt.Sprintf("stop[%d]", i), "invalid_value", "stop[%d] is empty", i)
		}
		out = append(out, s)
	}
	return out, nil
}

// promptInput is a completion prompt: text, or token ids taken as they are.
type promptInput struct {
	text   string
	tokens []int
	isIDs  bool
}

// parsePrompt accepts a string, an array of one string, an array of token
// ids, or an array of one array of token ids. Batches are refused: one
// request, one prompt, one choice.
func parsePrompt(raw json.RawMessage, vocab int) (promptInput, *errkind.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return promptInput{}, badInput("prompt", "missing_required_parameter", "prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return promptInput{text: s}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 {
			return promptInput{}, badInput("prompt", "unsupported_value", "prompt is an array of %d strings; send exactly one prompt per request", len(ss))
		}
		return promptInput{text: ss[0]}, nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) != nil {
		var batch [][]int
		if json.Unmarshal(raw, &batch) != nil {
			return promptInput{}, badInput("prompt", "invalid_type", "prompt must be a string, an array of one string, or an array of token ids")
		}
		if len(batch) != 1 {
			return promptInput{}, badInput("prompt", "unsupported_value", "prompt is %d token arrays; send exactly one prompt per request", len(batch))
		}
		ids = batch[0]
	}
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return promptInput{}, badInput(fmt.Sprintf("prompt[%d]", i), "invalid_value", "prompt[%d] is token id %d; the vocabulary has ids 0 to %d", i, id, vocab-1)
		}
	}
	return promptInput{tokens: ids, isIDs: true}, nil
}

// parseMessages validates chat messages and flattens their content to text.
func parseMessages(msgs []chatMessage) ([]chat.Message, *errkind.Error) {
	if len(msgs) == 0 {
		return nil, badInput("messages", "missing_required_parameter", "messages is required and must not be empty")
	}
	out := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "system", "user", "assistant":
		case "developer": // OpenAI's newer name for the system role
			role = "system"
		case "":
			return nil, badInput(fmt.Sprintf("messages[%d].role", i), "missing_required_parameter", "messages[%d].role is required", i)
		default:
			return nil, badInput(fmt.Sprintf("messages[%d].role", i), "unsupported_value", "messages[%d].role is %q; supported roles are system, developer, user and assistant", i, m.Role)
		}
		text, err := contentText(json.RawMessage(m.Content), i)
		if err != nil {
			return nil, err
		}
		out[i] = chat.Message{Role: role, Content: text}
	}
	return out, nil
}

// contentText accepts a string or an array of text parts.
func contentText(raw json.RawMessage, i int) (string, *errkind.Error) {
	param := fmt.Sprintf("messages[%d].content", i)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", badInput(param, "missing_required_parameter", "%s is required", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []contentPart
	if json.Unmarshal(raw, &parts) != nil {
		return "", badInput(param, "invalid_type", "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", badInput(fmt.Sprintf("%s[%d].type", param, j), "unsupported_value", "%s[%d] is a %q part; only text parts are supported", param, j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (c *completionRequest) modelName() string { return c.Model }
func (c *chatRequest) modelName() string       { return c.Model }

// unsupported refuses completion fields that are accepted by OpenAI but
// not implemented here, rather than silently ignoring them. echo is among
// them: prompt log probabilities are not computed.
func (c *completionRequest) unsupported() *errkind.Error {
	switch {
	case c.Echo != nil && *c.Echo:
		return badInput("echo", "unsupported_value", "echo is not supported")
	case c.Suffix != nil && *c.Suffix != "":
		return badInput("suffix", "unsupported_value", "suffix is not supported")
	case c.BestOf != nil && *c.BestOf != 1:
		return badInput("best_of", "unsupported_value", "best_of must be 1")
	}
	return nil
}

// resolve validates a completion request's fields for a model of vocab
// tokens. logprobs is a count of alternatives (0 to 5), null for off.
func (c *completionRequest) resolve(vocab int) (genParams, *errkind.Error) {
	g, err := c.commonParams.resolve(vocab)
	if err != nil {
		return g, err
	}
	if n := c.Logprobs; n != nil {
		if *n < 0 || *n > maxCompletionLogprobs {
			return g, badInput("logprobs", "invalid_value", "logprobs is %d; it must be between 0 and %d", *n, maxCompletionLogprobs)
		}
		g.sampling.Logprobs, g.sampling.TopLogprobs = true, *n
	}
	return g, nil
}

// resolve validates a chat request's fields for a model of vocab tokens.
// top_logprobs (0 to 20) may only come with logprobs true, as OpenAI
// requires: a count of alternatives for log probabilities not asked for
// is a mistake worth telling.
func (c *chatRequest) resolve(vocab int) (genParams, *errkind.Error) {
	g, err := c.commonParams.resolve(vocab)
	if err != nil {
		return g, err
	}
	on := c.Logprobs != nil && *c.Logprobs
	if n := c.TopLogprobs; n != nil {
		switch {
		case *n < 0 || *n > sample.MaxTopLogprobs:
			return g, badInput("top_logprobs", "invalid_value", "top_logprobs is %d; it must be between 0 and %d", *n, sample.MaxTopLogprobs)
		case !on:
			return g, badInput("top_logprobs", "invalid_value", "top_logprobs is only allowed when logprobs is true")
		}
		g.sampling.TopLogprobs = *n
	}
	g.sampling.Logprobs = on
	return g, nil
}

func (c *chatRequest) unsupported() *errkind.Error {
	switch {
	case !isNullish(c.Tools):
		return badInput("tools", "unsupported_value", "tools are not supported")
	case !isNullish(c.ToolChoice) && string(bytes.TrimSpace(c.ToolChoice)) != `"none"`:
		return badInput("tool_choice", "unsupported_value", "tool_choice is not supported")
	case c.ResponseFormat != nil && c.ResponseFormat.Type != "text":
		return badInput("response_format", "unsupported_value", "response_format must be {\"type\": \"text\"}")
	}
	return nil
}

func isNullish(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "" || s == "null" || s == "[]"
}
