// Package embedded ships the default model, stories260K, inside the binary so
// that `bulkhead serve` and `bulkhead generate` work with no files at all.
//
// stories260K is a 260K-parameter Llama-architecture model trained on
// TinyStories, distributed under the MIT licence reproduced in License. The
// notice must travel with every copy of the weights, so this package exposes
// it and the CLI prints it on request.
//
// This package owns the bytes only; it never parses them.
package embedded

import _ "embed"

// Checkpoint is the llama2.c checkpoint of stories260K.
//
//go:embed stories260K.bin
var Checkpoint []byte

// Tokenizer is the llama2.c tokenizer file (512-piece SentencePiece BPE) that
// goes with Checkpoint.
//
//go:embed tok512.bin
var Tokenizer []byte

// License is the MIT licence notice of stories260K.
//
//go:embed LICENSE-stories260K.txt
var License string

// Name is the model id under which the embedded model is served.
const Name = "stories260K"
