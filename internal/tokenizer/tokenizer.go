package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// Model names a vocabulary kind as GGUF's tokenizer.ggml.model spells it.
const (
	ModelLlama = "llama" // SentencePiece BPE with byte fallback
	ModelGPT2  = "gpt2"  // byte-level BPE
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	TypeUndefined   int32 = 0 // treated as normal
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// spaceMark is SentencePiece's visible space, U+2581.
const spaceMark = "\u2581"

// Spec is the tokenizer as GGUF stores it (tokenizer.ggml.* keys). Pieces use GGUF conventions:
// SentencePiece pieces use U+2581 '▁' for space; byte-level BPE pieces use GPT-2's
// byte-to-unicode map.
type Spec struct {
	Model  string    // "llama" (SentencePiece BPE with byte fallback) or "gpt2" (byte-level BPE)
	Pre    string    // gpt2 pre-tokenizer: "llama-bpe" (Llama 3), "qwen2", "default"/"gpt2"; unknown names are an error
	Tokens []string  // piece text by id
	Scores []float32 // llama: merge scores by id, higher merges first, never NaN; may be nil for gpt2
	Types  []int32   // GGUF token types by id; nil means all normal (llama: "<0xNN>" pieces are bytes)
	Merges []string  // gpt2: "a b" in rank order

	BOS, EOS, UNK, PAD int   // -1 when absent
	EOT                []int // extra end-of-turn/end-of-text ids (e.g. <|eot_id|>)

	AddBOS         bool // prepend BOS when the caller asks for special tokens
	AddSpacePrefix bool // llama: prepend a space to each run of text (true for llama2.c / Llama 2)
}

// Tokenizer encodes and decodes text for one vocabulary. It is immutable after construction and
// safe for concurrent use, except that StopAtBOS must be set before sharing it.
type Tokenizer struct {
	spec Spec // as given to New, returned by Spec()

	// StopAtBOS makes IsEnd report BOS as an end: the llama2.c stories models emit BOS between
	// stories and the reference sampler stops there. FromLlama2C sets it.
	StopAtBOS bool

	types  []int32
	pieces [][]byte // decoded bytes of each token's text (byte tokens: their byte)
	hidden []bool   // Decode renders these as "": control, unknown, unused

	// lookup maps text to the id that encoding may produce for it. llama: internal text uses
	// real spaces; only normal and user-defined pieces. gpt2: raw bytes of every non-special token.
	lookup map[string]int
	byteID [256]int // id of the token for each raw byte; -1 when the vocabulary has none

	// gpt2
	merges       map[uint64]merge // key: left id << 32 | right id
	pre          pretokenizer
	ignoreMerges bool // llama-bpe: a pre-token that is itself a token is emitted whole
	cache        *wordCache

	// EncodeSpecial: special token strings grouped by first byte, longest first.
	specials [256][]special
	ends     map[int]bool
}

type merge struct {
	rank   int32
	result int32
}

type special struct {
	text string
	id   int
}

// New validates s and builds a Tokenizer. Errors name the offending field, index and value.
func New(s Spec) (*Tokenizer, error) {
	n := len(s.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary is empty")
	}
	if s.Types != nil && len(s.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(s.Types), n)
	}
	if s.Scores != nil && len(s.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(s.Scores), n)
	}
	for _, f := range []struct {
		name string
		id   int
	}{{"BOS", s.BOS}, {"EOS", s.EOS}, {"UNK", s.UNK}, {"PAD", s.PAD}} {
		if f.id < -1 || f.id >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d is outside the vocabulary of %d tokens (use -1 for none)", f.name, f.id, n)
		}
	}
	for i, id := range s.EOT {
		if id < 0 || id >= n {
			return nil, fmt.Errorf("tokenizer: EOT[%d] id %d is outside the vocabulary of %d tokens", i, id, n)
		}
	}
	if s.AddBOS && s.BOS < 0 {
		return nil, fmt.Errorf("tokenizer: AddBOS is set but the vocabulary has no BOS token")
	}
	t := &Tokenizer{spec: cloneSpec(s), types: make([]int32, n), ends: map[int]bool{}}
	for i := range t.types {
		t.types[i] = TypeNormal
		if s.Types != nil {
			ty := s.Types[i]
			if ty < TypeUndefined || ty > TypeByte {
				return nil, fmt.Errorf("tokenizer: token %d %q has type %d, want 0..6", i, s.Tokens[i], ty)
			}
			if ty != TypeUndefined {
				t.types[i] = ty
			}
		}
	}
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	var err error
	switch s.Model {
	case ModelLlama:
		if s.Scores == nil {
			return nil, fmt.Errorf("tokenizer: llama vocabulary has no scores")
		}
		// Scores decide the merge order, and NaN compares false with
		// everything, so one NaN makes the order depend on the heap's
		// history. ±Inf still order (real files use -1000 or 0 where
		// they mean "merge late"), so only NaN is refused.
		for i, v := range s.Scores {
			if math.IsNaN(float64(v)) {
				return nil, fmt.Errorf("tokenizer: llama token %d %q has score NaN; merge order needs every score to be a number", i, s.Tokens[i])
			}
		}
		err = t.initLlama()
	case ModelGPT2:
		err = t.initGPT2()
	default:
		return nil, fmt.Errorf("tokenizer: unknown model %q (want %q or %q)", s.Model, ModelLlama, ModelGPT2)
	}
	if err != nil {
		return nil, err
	}
	t.initSpecials()
	if s.EOS >= 0 {
		t.ends[s.EOS] = true
	}
	for _, id := range s.EOT {
		t.ends[id] = true
	}
	return t, nil
}

func cloneSpec(s Spec) Spec {
	s.Tokens = slices.Clone(s.Tokens)
	s.Scores = slices.Clone(s.Scores)
	s.Types = slices.Clone(s.Types)
	s.Merges = slices.Clone(s.Merges)
	s.EOT = slices.Clone(s.EOT)
	return s
}

// initLlama builds the SentencePiece tables. Internally text keeps real spaces and pieces have
// '▁' turned back into ' ': then a literal U+2581 in the input stays distinct from a space (it
// byte-falls back), which keeps Decode(Encode(s)) == s for every valid s.
func (t *Tokenizer) initLlama() error {
	s := &t.spec
	n := len(s.Tokens)
	t.pieces = make([][]byte, n)
	t.hidden = make([]bool, n)
	t.lookup = make(map[string]int, n)
	for i, tok := range s.Tokens {
		if s.Types == nil {
			if _, ok := parseByteToken(tok); ok {
				t.types[i] = TypeByte
			}
		}
		switch t.types[i] {
		case TypeByte:
			b, ok := parseByteToken(tok)
			if !ok {
				return fmt.Errorf("tokenizer: byte token %d is %q, want <0xNN>", i, tok)
			}
			t.pieces[i] = []byte{b}
			if t.byteID[b] < 0 {
				t.byteID[b] = i
			}
		case TypeControl, TypeUnknown, TypeUnused:
			t.pieces[i] = []byte(tok)
			t.hidden[i] = true
		default:
			text := strings.ReplaceAll(tok, spaceMark, " ")
			t.pieces[i] = []byte(text)
			if text != "" {
				t.lookup[text] = i // a later duplicate wins, as in llama.cpp
			}
		}
	}
	if s.UNK < 0 {
		for b, id := range t.byteID {
			if id < 0 {
				return fmt.Errorf("tokenizer: llama vocabulary has no byte token <0x%02X> and no UNK token to fall back to", b)
			}
		}
	}
	return nil
}

// parseByteToken reads a SentencePiece byte piece "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// initSpecials collects the strings EncodeSpecial turns into ids: control and user-defined tokens.
func (t *Tokenizer) initSpecials() {
	for i, tok := range t.spec.Tokens {
		if tok == "" || (t.types[i] != TypeControl && t.types[i] != TypeUserDefined) {
			continue
		}
		t.specials[tok[0]] = append(t.specials[tok[0]], special{tok, i})
	}
	for _, list := range &t.specials {
		// Longest first so "<|eot_id|>" is never cut short by a shorter token sharing its prefix;
		// equal lengths by id for determinism.
		slices.SortFunc(list, func(a, b special) int {
			if len(a.text) != len(b.text) {
				return len(b.text) - len(a.text)
			}
			return a.id - b.id
		})
	}
}

// Spec returns the specification the tokenizer was built from; New(t.Spec()) builds an equal
// tokenizer. The slices are copies.
func (t *Tokenizer) Spec() Spec { return cloneSpec(t.spec) }

// VocabSize is the number of token ids.
func (t *Tokenizer) VocabSize() int { return len(t.spec.Tokens) }

// BOS is the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int { return t.spec.BOS }

// EOS is the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int { return t.spec.EOS }

// AddBOS reports whether the model expects BOS at the start of a prompt.
func (t *Tokenizer) AddBOS() bool { return t.spec.AddBOS }

// Type returns the GGUF token type of id (undefined reads as normal), or -1 for an id outside
// the vocabulary.
func (t *Tokenizer) Type(id int) int32 {
	if id < 0 || id >= len(t.types) {
		return -1
	}
	return t.types[id]
}

// IsEnd reports whether generating id ends the sequence: EOS, the EOT ids, and BOS when
// StopAtBOS is set.
func (t *Tokenizer) IsEnd(id int) bool {
	if t.ends[id] {
		return true
	}
	return t.StopAtBOS && id >= 0 && id == t.spec.BOS
}

// Encode turns text into ids, prepending BOS when addBOS is set and the vocabulary has one.
// Text that spells a special token (such as "<|eot_id|>") is encoded as plain text, so user
// input can never inject control tokens.
func (t *Tokenizer) Encode(text string, addBOS bool) []int {
	out := t.startOutput(addBOS, len(text))
	return t.encodeText(out, text, true)
}

// EncodeSpecial is Encode, except that control and user-defined token strings in text become
// their ids. It is for trusted text such as rendered chat templates.
func (t *Tokenizer) EncodeSpecial(text string, addBOS bool) []int {
	out := t.startOutput(addBOS, len(text))
	prevSpecial := true
	for len(text) > 0 {
		at, sp := t.nextSpecial(text)
		if at > 0 {
			out = t.encodeText(out, text[:at], prevSpecial)
			prevSpecial = false
		}
		if sp == nil {
			break
		}
		out = append(out, sp.id)
		prevSpecial = true
		text = text[at+len(sp.text):]
	}
	return out
}

// Part is a piece of text for EncodeParts. Only Trusted parts (text a chat
// template wrote) may spell special tokens; in the others (what a user
// sent) such strings are plain text.
type Part struct {
	Text    string
	Trusted bool
}

// EncodeParts encodes the concatenation of parts as EncodeSpecial encodes
// one string, except that special token strings count only inside Trusted
// parts. Text runs are joined across part boundaries before encoding, so
// the ids are EncodeSpecial's whenever no untrusted part spells a special
// token: SentencePiece adds its space only at the start and after a real
// special token, and merges span the boundaries. (Encoding each part on
// its own put a space before every part and broke merges at the seams.)
func (t *Tokenizer) EncodeParts(parts []Part, addBOS bool) []int {
	n := 0
	for _, p := range parts {
		n += len(p.Text)
	}
	out := t.startOutput(addBOS, n)
	var run strings.Builder
	atStart := true
	flush := func() {
		if run.Len() > 0 {
			out = t.encodeText(out, run.String(), atStart)
			atStart = false
			run.Reset()
		}
	}
	for _, p := range parts {
		text := p.Text
		for len(text) > 0 {
			at, sp := len(text), (*special)(nil)
			if p.Trusted {
				at, sp = t.nextSpecial(text)
			}
			run.WriteString(text[:at])
			if sp == nil {
				break
			}
			flush()
			out = append(out, sp.id)
			atStart = true
			text = text[at+len(sp.text):]
		}
	}
	flush()
	return out
}

func (t *Tokenizer) startOutput(addBOS bool, textLen int) []int {
	out := make([]int, 0, textLen/3+2)
	if addBOS && t.spec.BOS >= 0 {
		out = append(out, t.spec.BOS)
	}
	return out
}

// nextSpecial finds the first special token string in text, longest at that position.
// It returns len(text), nil when there is none.
func (t *Tokenizer) nextSpecial(text string) (int, *special) {
	for i := 0; i < len(text); i++ {
		list := t.specials[text[i]]
		for j := range list {
			if strings.HasPrefix(text[i:], list[j].text) {
				return i, &list[j]
			}
		}
	}
	return len(text), nil
}

// encodeText encodes one run of text that contains no special tokens. atStart marks a run at the
// beginning of the input or right after a special token, where SentencePiece adds its space.
func (t *Tokenizer) encodeText(out []int, text string, atStart bool) []int {
	if text == "" {
		return out
	}
	if t.spec.Model == ModelLlama {
		if t.spec.AddSpacePrefix && atStart {
			text = " " + text
		}
		return t.encodeSPM(out, text)
	}
	return t.encodeBPE(out, text)
}

// wordCache remembers byte-level BPE results per pre-token. It is bounded: when full it is
// emptied, which is cheap and keeps memory fixed without LRU bookkeeping on the hot path.
type wordCache struct {
	mu    sync.Mutex
	limit int
	m     map[string][]int32
}

func newWordCache(limit int) *wordCache {
	return &wordCache{limit: limit, m: make(map[string][]int32)}
}

func (c *wordCache) get(k string) ([]int32, bool) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	return v, ok
}

func (c *wordCache) put(k string, v []int32) {
	c.mu.Lock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[k] = v
	c.mu.Unlock()
}
