package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
// 68 bytes to U+0100 upwards in byte order, so every byte has a visible, non-space character.
var byteToRune, runeToByte = func() ([256]rune, [256 + 68]int16) {
	var b2r [256]rune
	var r2b [256 + 68]int16 // -1: not a byte-level character
	for i := range r2b {
		r2b[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
		if printable {
			b2r[b] = rune(b)
		} else {
			b2r[b] = next
			next++
		}
		r2b[b2r[b]] = int16(b)
	}
	return b2r, r2b
}()

// ByteLevel maps raw bytes to GPT-2 byte-level piece text (as stored in GGUF vocabularies).
func ByteLevel(raw []byte) string {
	var sb strings.Builder
	for _, b := range raw {
		sb.WriteRune(byteToRune[b])
	}
	return sb.String()
}

// unByteLevel reverses ByteLevel. Characters outside the map (not produced by ByteLevel) keep
// their UTF-8 bytes.
func unByteLevel(piece string) []byte {
	out := make([]byte, 0, len(piece))
	for _, r := range piece {
		if r >= 0 && int(r) < len(runeToByte) && runeToByte[r] >= 0 {
			out = append(out, byte(runeToByte[r]))
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// wordCacheLimit bounds the per-word cache; at this size it holds a few MB.
const (
	wordCacheLimit  = 1 << 16
	wordCacheMaxLen = 64 // longer pre-tokens are rare and not worth keeping
)

func (t *Tokenizer) initGPT2() error {
	s := &t.spec
	n := len(s.Tokens)
	pre, ignore, err := pretokenizerFor(s.Pre)
	if err != nil {
		return err
	}
	t.pre, t.ignoreMerges = pre, ignore
	t.pieces = make([][]byte, n)
	t.hidden = make([]bool, n)
	t.lookup = make(map[string]int, n)
	byText := make(map[string]int, n) // piece text as stored -> id, for reading merges
	for i, tok := range s.Tokens {
		switch t.types[i] {
		case TypeControl, TypeUnknown, TypeUnused:
			t.pieces[i] = []byte(tok)
			t.hidden[i] = true
		case TypeUserDefined:
			// Added tokens are stored as plain text, not byte-level mapped.
			t.pieces[i] = []byte(tok)
		default:
			raw := unByteLevel(tok)
			t.pieces[i] = raw
			t.lookup[string(raw)] = i
			byText[tok] = i
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := t.lookup[string([]byte{byte(b)})]
		if !ok {
			return fmt.Errorf("tokenizer: gpt2 vocabulary has no token for byte 0x%02X (piece %q)", b, string(byteToRune[b]))
		}
		t.byteID[b] = id
	}
	t.merges = make(map[uint64]merge, len(s.Merges))
	for rank, m := range s.Merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok || a == "" || b == "" {
			return fmt.Errorf("tokenizer: merge %d is %q, want two pieces separated by one space", rank, m)
		}
		la, okA := byText[a]
		rb, okB := byText[b]
		res, okR := byText[a+b]
		switch {
		case !okA:
			return fmt.Errorf("tokenizer: merge %d %q: left piece %q is not a token", rank, m, a)
		case !okB:
			return fmt.Errorf("tokenizer: merge %d %q: right piece %q is not a token", rank, m, b)
		case !okR:
			return fmt.Errorf("tokenizer: merge %d %q: merged piece %q is not a token", rank, m, a+b)
		}
		key := uint64(la)<<32 | uint64(rb)
		if _, dup := t.merges[key]; !dup { // the first (lowest) rank wins
			t.merges[key] = merge{rank: int32(rank), result: int32(res)}
		}
	}
	t.cache = newWordCache(wordCacheLimit)
	return nil
}

// encodeBPE pre-tokenizes text and merges each pre-token's bytes by rank.
func (t *Tokenizer) encodeBPE(out []int, text string) []int {
	var syms []symbol
	for i := 0; i < len(text); {
		e := t.pre(text, i)
		word := text[i:e]
		i = e
		if t.ignoreMerges {
			if id, ok := t.lookup[word]; ok {
				out = append(out, id)
				continue
			}
		}
		if len(word) == 1 {
			out = append(out, t.byteID[word[0]])
			continue
		}
		cacheable := len(word) <= wordCacheMaxLen
		if cacheable {
			if ids, ok := t.cache.get(word); ok {
				for _, id := range ids {
					out = append(out, int(id))
				}
				continue
			}
		}
		syms = syms[:0]
		for k := 0; k < len(word); k++ {
			syms = append(syms, symbol{start: k, end: k + 1, id: int32(t.byteID[word[k]]), prev: k - 1, next: k + 1})
		}
		syms[len(syms)-1].next = -1
		syms = mergeSymbols(syms, func(a, b *symbol) (float64, int32, bool) {
			m, ok := t.merges[uint64(a.id)<<32|uint64(b.id)]
			return float64(m.rank), m.result, ok
		})
		ids := make([]int32, len(syms))
		for k, s := range syms {
			ids[k] = s.id
			out = append(out, int(s.id))
		}
		if cacheable {
			t.cache.put(strings.Clone(word), ids) // a clone: word would pin the whole input
		}
	}
	return out
}
