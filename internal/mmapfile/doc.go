// Package mmapfile maps model files read-only, for the readers of the
// formats Bulkhead loads (gguf, llama2c): their tensors alias the mapping,
// so opening a model costs address space rather than memory, and the
// weights stay in the page cache, shared with every process that maps the
// same file.
//
// It owns the mapping and the hints about it. It must never map writable
// (tensor data is never modified, and a write through a mapping of a
// model file would change the file), and where a platform cannot map it
// reads the file whole instead, so that every caller works everywhere.
package mmapfile
