package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// pretokenizer returns the end of the pre-token that starts at byte i of text (i < len(text)).
// Each one reproduces a model's split regex, which Go's regexp cannot run because of the
// lookahead in `\s+(?!\S)`. Alternatives are tried in the regex's order, each greedy with the
// backtracking the regex engine would do, so the first that matches wins.
//
// Character classes: \p{L} is unicode.IsLetter, \p{N} unicode.IsNumber, \s unicode.IsSpace
// (Unicode White_Space: it includes U+0085 and excludes U+FEFF, where JavaScript's \s does the
// opposite). An invalid UTF-8 byte is one character of its own outside all three classes.
type pretokenizer func(text string, i int) int

// pretokenizerFor maps a GGUF tokenizer.ggml.pre name to its splitter.
func pretokenizerFor(name string) (p pretokenizer, ignoreMerges bool, err error) {
	switch name {
	case "llama-bpe", "llama3", "llama-v3":
		// llama.cpp sets ignore_merges for Llama 3, as Hugging Face's tokenizer.json does.
		return splitLlama3, true, nil
	case "qwen2", "deepseek-r1-qwen":
		return splitQwen2, false, nil
	case "", "default", "gpt2", "gpt-2":
		return splitGPT2, false, nil
	}
	return nil, false, fmt.Errorf("tokenizer: unknown gpt2 pre-tokenizer %q (supported: llama-bpe, qwen2, default/gpt2)", name)
}

// at decodes the character at byte i; past the end it returns (-1, 0).
func at(text string, i int) (rune, int) {
	if i >= len(text) {
		return -1, 0
	}
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	r, size := utf8.DecodeRuneInString(text[i:])
	if r == utf8.RuneError && size == 1 {
		return -2, 1 // invalid byte: matches no class (and is not U+FFFD, which is a symbol)
	}
	return r, size
}

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	return r >= 0 && unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || r >= '\t' && r <= '\r'
	}
	return r >= 0 && unicode.IsSpace(r)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// isOther is [^\s\p{L}\p{N}]; past the end (-1) is not a character.
func isOther(r rune) bool { return r != -1 && !isS(r) && !isL(r) && !isN(r) }

// run extends from byte i over characters satisfying f and returns the end.
func run(text string, i int, f func(rune) bool) int {
	for i < len(text) {
		r, n := at(text, i)
		if !f(r) {
			break
		}
		i += n
	}
	return i
}

// contraction matches 's 't 're 've 'm 'll 'd at i (text[i] == '\”), case-insensitively when
// fold is set, and returns the end or -1.
func contraction(text string, i int, fold bool) int {
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if i+1 >= len(text) {
		return -1
	}
	switch lower(text[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(text) && lower(text[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(text) && lower(text[i+2]) == 'l' {
			return i + 3
		}
	}
	return -1
}

// splitLlama3 is
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitLlama3(text string, i int) int { return splitLlamaLike(text, i, 3) }

// splitQwen2 is the Llama 3 pattern with \p{N} taking one digit at a time.
func splitQwen2(text string, i int) int { return splitLlamaLike(text, i, 1) }

func splitLlamaLike(text string, i int, maxDigits int) int {
	c0, n0 := at(text, i)
	c1, n1 := at(text, i+n0)
	if c0 == '\'' {
		if e := contraction(text, i, true); e >= 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if !isCRLF(c0) && !isL(c0) && !isN(c0) && isL(c1) {
		return run(text, i+n0+n1, isL)
	}
	if isL(c0) {
		return run(text, i+n0, isL)
	}
	// \p{N}{1,3}
	if isN(c0) {
		e := i
		for k := 0; k < maxDigits; k++ {
			r, n := at(text, e)
			if !isN(r) {
				break
			}
			e += n
		}
		return e
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	if c0 == ' ' && isOther(c1) {
		return run(text, run(text, i+n0, isOther), isCRLF)
	}
	if isOther(c0) {
		return run(text, run(text, i, isOther), isCRLF)
	}
	return splitSpaces(text, i, true)
}

// splitSpaces handles a whitespace run at i: \s*[\r\n]+ (when crlf), then \s+(?!\S), then \s+.
func splitSpaces(text string, i int, crlf bool) int {
	end, lastBreak, lastStart, count := i, -1, i, 0
	for end < len(text) {
		r, n := at(text, end)
		if !isS(r) {
			break
		}
		if isCRLF(r) {
			lastBreak = end + n
		}
		lastStart = end
		end += n
		count++
	}
	if crlf && lastBreak >= 0 {
		// \s* backtracks to the last line break; [\r\n]+ then takes it and nothing after,
		// because the next character is either not whitespace or not a break.
		return lastBreak
	}
	if end == len(text) || count == 1 {
		// \s+(?!\S) at the end of text, or \s+ for a single space before a non-space.
		return end
	}
	// \s+(?!\S) gives back the last whitespace character so it can start the next word.
	return lastStart
}

// splitGPT2 is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(text string, i int) int {
	c0, n0 := at(text, i)
	if c0 == '\'' {
		if e := contraction(text, i, false); e >= 0 {
			return e
		}
	}
	j := i
	c := c0
	if c0 == ' ' {
		// The optional space only helps when the next character starts a class run.
		if c1, _ := at(text, i+n0); isL(c1) || isN(c1) || isOther(c1) {
			j, c = i+n0, c1
		}
	}
	switch {
	case isL(c):
		return run(text, j, isL)
	case isN(c):
		return run(text, j, isN)
	case isOther(c):
		return run(text, j, isOther)
	}
	return splitSpaces(text, i, false)
}
