package tokenizer

import "unicode/utf8"

// encodeSPM encodes text (space prefix already added) the way llama2.c and llama.cpp's
// SentencePiece path do: start from one symbol per UTF-8 character (an invalid byte is a
// symbol of its own), repeatedly merge the adjacent pair whose concatenation is a piece with the
// highest score, leftmost on ties, then emit each symbol's id or, for a symbol that is not a
// piece, one byte token per byte.
func (t *Tokenizer) encodeSPM(out []int, text string) []int {
	syms := make([]symbol, 0, len(text))
	for i := 0; i < len(text); {
		_, size := utf8.DecodeRuneInString(text[i:])
		id := int32(-1)
		if v, ok := t.lookup[text[i:i+size]]; ok {
			id = int32(v)
		}
		n := len(syms)
		syms = append(syms, symbol{start: i, end: i + size, id: id, prev: n - 1, next: n + 1})
		i += size
	}
	syms[len(syms)-1].next = -1
	scores := t.spec.Scores
	syms = mergeSymbols(syms, func(a, b *symbol) (float64, int32, bool) {
		id, ok := t.lookup[text[a.start:b.end]]
		if !ok {
			return 0, 0, false
		}
		return -float64(scores[id]), int32(id), true
	})
	for _, s := range syms {
		if s.id >= 0 {
			out = append(out, int(s.id))
			continue
		}
		for i := s.start; i < s.end; i++ {
			if id := t.byteID[text[i]]; id >= 0 {
				out = append(out, id)
			} else {
				out = append(out, t.spec.UNK) // New guarantees UNK exists when a byte token is missing
			}
		}
	}
	return out
}
