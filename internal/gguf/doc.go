// Package gguf reads and writes GGUF weight files (version 3, and version 2
// for reading), the format llama.cpp and the GGML ecosystem use.
//
// It owns the GGUF byte format: the header, the typed key/value metadata
// (scalars, strings, arrays and nested arrays), the tensor descriptions and
// the aligned tensor data section. Open memory-maps a file read-only and
// returns tensors whose Data slices alias the mapping; Parse does the same
// over bytes already in memory; Write streams a complete file to an
// io.Writer.
//
// It must never:
//   - trust a count or offset from the file: every length is checked against
//     the bytes that remain before anything is allocated for it, and every
//     tensor is checked to lie inside the file, aligned, and apart from the
//     others;
//   - copy tensor data: a model may be many gigabytes, and the mapping is the
//     only copy;
//   - interpret model semantics: what "llama.block_count" means, or which
//     tensors a model needs, belongs to the model loaders. This package only
//     knows the key "general.alignment", because the byte layout depends on
//     it, and "general.architecture", as a convenience.
//
// Errors name the file ("gguf model.gguf: ..." or "gguf: ..." for Parse) and
// the problem with its numbers, and are *FormatError values when the bytes
// themselves are at fault. No input makes the reader panic; FuzzParse keeps
// that true.
package gguf
