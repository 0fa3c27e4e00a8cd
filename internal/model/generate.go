package model

import (
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// Generate feeds prompt through the model in chunks of at most the
// Runner's capacity, then samples up to maxNew tokens, calling emit with
// each one. It stops early when emit returns false or the tokenizer marks a
// token as an end of text (EOS, end-of-turn, or BOS, which the story models
// use to separate documents); the end token itself is not emitted. It
// returns the number of tokens emitted.
//
// Generate is the single-sequence path used by `bulkhead generate` and the
// model benchmark; the serving engine batches many sequences through
// Forward directly.
func (r *Runner) Generate(prompt []int, cache SeqCache, maxNew int, s *sample.Sampler, emit func(tok int) bool) (int, error) {
	c := &r.m.Config
	if len(prompt) == 0 {
		return 0, fmt.Errorf("generate: empty prompt")
	}
	if maxNew < 0 || maxNew > r.ctx-len(prompt) {
		return 0, fmt.Errorf("generate: prompt of %d tokens plus %d new tokens exceeds the context of %d", len(prompt), maxNew, r.ctx)
	}
	logits := make([]float32, c.Vocab)
	seq := &Seq{Cache: cache}
	batch := []*Seq{seq}
	for pos := 0; pos < len(prompt); {
		end := min(len(prompt), pos+r.max)
		seq.Tokens, seq.Pos = prompt[pos:end], pos
		seq.Logits = nil
		if end == len(prompt) {
			seq.Logits = logits
		}
		if err := r.Forward(batch); err != nil {
			return 0, err
		}
		if seq.Err != nil {
			return 0, seq.Err
		}
		pos = end
	}
	tok := []int{0}
	pos := len(prompt)
	for n := 0; n < maxNew; n++ {
		next := s.Next(logits)
		if r.m.IsEnd(next) {
			return n, nil
		}
		if !emit(next) {
			return n + 1, nil
		}
		if n == maxNew-1 {
			return n + 1, nil
		}
		tok[0] = next
		seq.Tokens, seq.Pos, seq.Logits = tok, pos, logits
		if err := r.Forward(batch); err != nil {
			return n + 1, err
		}
		if seq.Err != nil {
			return n + 1, seq.Err
		}
		pos++
	}
	return maxNew, nil
}

// IsEnd reports whether generating tok ends the text.
func (m *Model) IsEnd(tok int) bool {
	t := m.Tokenizer
	return t != nil && (t.IsEnd(tok) || tok == t.BOS())
}
