//go:build !bulkhead_placeholder

package main

// buildTags are passed to `go build` when the end-to-end tests build the
// binary, so a test run under a mutation tag tests the mutated binary.
const buildTags = ""
