package tokenizer

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// FuzzLlama2CFile: a llama2.c tokenizer file is read from wherever the
// operator points --tokenizer; any bytes give a tokenizer or an error,
// never a panic, and a tokenizer read from them encodes and decodes text
// with ids inside its vocabulary. Seeds: the shipped tok512.bin and cuts
// of it; the corpus lives in testdata/fuzz/FuzzLlama2CFile.
//
//	go test -run '^$' -fuzz FuzzLlama2CFile ./internal/tokenizer/
func FuzzLlama2CFile(f *testing.F) {
	f.Add(embedded.Tokenizer, 512, "Once upon a time")
	f.Add(embedded.Tokenizer[:len(embedded.Tokenizer)/2], 512, "a")
	f.Add(embedded.Tokenizer[:4], 259, "")
	f.Add([]byte{1, 0, 0, 0}, 300, "é")
	f.Fuzz(func(t *testing.T, data []byte, vocab int, text string) {
		if vocab > 1<<16 {
			vocab %= 1 << 16 // the sizes of real vocabularies; bounds the allocation
		}
		tok, err := FromLlama2C(data, vocab)
		if err != nil {
			return
		}
		ids := tok.Encode(text, true)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d outside a vocabulary of %d", text, id, tok.VocabSize())
			}
		}
		_ = tok.Decode(ids)
	})
}
