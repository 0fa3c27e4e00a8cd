package convert

import (
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// FromLlama2C describes a parsed llama2.c checkpoint and its tokenizer for
// WriteGGUF. No weights are copied until WriteGGUF encodes them, one
// tensor at a time. For a checkpoint from llama2c.Open each tensor's pages
// are evicted once it is written, so converting a checkpoint larger than
// memory holds about one tensor of it, not the file. c must stay open
// while the model is written.
func FromLlama2C(name string, c *llama2c.Checkpoint, tok *tokenizer.Tokenizer) *Model {
	return &Model{
		Name:      name,
		Config:    model.Llama2CConfig(c.Header),
		Tokenizer: tok.Spec(),
		Tensors:   c.Tensors,
		written:   c.Evict,
	}
}
