package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// FromLlama2C reads a llama2.c tokenizer file (tokenizer.bin, tok512.bin): a little-endian
// int32 max_token_len, then per token a float32 score, an int32 byte length and the bytes.
//
// The Spec it builds follows GGUF conventions: spaces become '▁'; id 0 is the unknown token,
// ids 1 and 2 are BOS and EOS (control; llama2.c's "\n<s>\n" and "\n</s>\n" are trimmed to
// "<s>" and "</s>"), ids 3..258 are byte tokens and the rest are normal. AddBOS and
// AddSpacePrefix are set, and StopAtBOS because the stories models end a story with BOS.
func FromLlama2C(data []byte, vocabSize int) (*Tokenizer, error) {
	const firstNormal = 3 + 256
	if vocabSize < firstNormal {
		return nil, fmt.Errorf("tokenizer: llama2.c vocabulary size %d is below %d (3 special tokens and 256 bytes)", vocabSize, firstNormal)
	}
	if len(data) < 4 {
		return nil, fmt.Errorf("tokenizer: llama2.c tokenizer is %d bytes, too short for its header", len(data))
	}
	maxLen := int32(binary.LittleEndian.Uint32(data))
	if maxLen <= 0 {
		return nil, fmt.Errorf("tokenizer: llama2.c tokenizer declares max_token_len %d", maxLen)
	}
	// Each token takes at least its 8-byte score and length, so a vocabulary size (from a
	// checkpoint header) that the file cannot hold is refused before the tables it sizes are
	// allocated.
	if vocabSize > (len(data)-4)/8 {
		return nil, fmt.Errorf("tokenizer: llama2.c tokenizer of %d bytes cannot hold %d tokens (each takes at least 8 bytes); is the vocabulary size %d right?",
			len(data), vocabSize, vocabSize)
	}
	s := Spec{
		Model:          ModelLlama,
		Tokens:         make([]string, vocabSize),
		Scores:         make([]float32, vocabSize),
		Types:          make([]int32, vocabSize),
		BOS:            1,
		EOS:            2,
		UNK:            0,
		PAD:            -1,
		AddBOS:         true,
		AddSpacePrefix: true,
	}
	off := 4
	for i := 0; i < vocabSize; i++ {
		if len(data)-off < 8 {
			return nil, fmt.Errorf("tokenizer: llama2.c tokenizer ends at byte %d inside the header of token %d of %d", len(data), i, vocabSize)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		n := int32(binary.LittleEndian.Uint32(data[off+4:]))
		off += 8
		if n < 0 || n > maxLen || int64(n) > int64(len(data)-off) {
			return nil, fmt.Errorf("tokenizer: llama2.c token %d at byte %d has length %d (max_token_len %d, %d bytes left)", i, off-4, n, maxLen, len(data)-off)
		}
		piece := string(data[off : off+int(n)])
		off += int(n)
		s.Scores[i] = score
		switch {
		case i == 0:
			s.Types[i] = TypeUnknown
		case i <= 2:
			s.Types[i] = TypeControl
			piece = strings.TrimSpace(piece)
		case i < firstNormal:
			s.Types[i] = TypeByte
			if b, ok := parseByteToken(piece); !ok || int(b) != i-3 {
				return nil, fmt.Errorf("tokenizer: llama2.c token %d is %q, want byte token <0x%02X>", i, piece, i-3)
			}
		default:
			s.Types[i] = TypeNormal
			piece = strings.ReplaceAll(piece, " ", spaceMark)
		}
		s.Tokens[i] = piece
	}
	if off != len(data) {
		return nil, fmt.Errorf("tokenizer: llama2.c tokenizer has %d bytes after token %d; is the vocabulary size %d right?", len(data)-off, vocabSize-1, vocabSize)
	}
	t, err := New(s)
	if err != nil {
		return nil, err
	}
	t.StopAtBOS = true
	return t, nil
}
