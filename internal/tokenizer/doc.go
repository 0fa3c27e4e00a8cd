// Package tokenizer turns text into token ids and token ids back into text.
//
// It owns two vocabulary kinds, described by a Spec in the shape GGUF stores them
// (tokenizer.ggml.* keys):
//
//   - "llama": SentencePiece BPE with byte fallback (Llama 2, llama2.c's tok512 of the shipped
//     stories model). Pieces are merged by score, highest first, leftmost on ties.
//   - "gpt2": byte-level BPE (GPT-2, Llama 3, Qwen2). Text is split by a pre-tokenizer that
//     reproduces the model's regular expression by hand, each piece's bytes are mapped through
//     GPT-2's bytes_to_unicode table and merged by rank.
//
// It also owns the streaming Decoder, which never emits part of a UTF-8 character, and the
// rules for which ids end a generation (IsEnd).
//
// It must never log or otherwise retain the text it encodes or decodes beyond a bounded cache of
// pre-token results (held in memory only, never written out), and it must never depend on model
// weights: a tokenizer is built from a Spec or from a llama2.c tokenizer file alone.
//
// A Tokenizer is immutable after New and safe for concurrent use; a Decoder is not.
package tokenizer
