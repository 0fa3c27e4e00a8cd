// Package config reads and validates the YAML configuration of `bulkhead
// serve` (and of the tools that share it, such as `bulkhead preflight`).
//
// It owns the file format: the key names, their defaults, strict decoding
// (an unknown or misspelt key is an error naming the key and its line) and
// validation that rejects contradictory settings before anything starts.
// docs/configuration.md documents every key.
//
// It must never log, print or put into an error message an API key: errors
// about a key name the tenant and the key's position, not its value. It
// must never read the model file or size anything from the hardware; the
// serve command resolves settings that depend on the model (Resolve).
package config
