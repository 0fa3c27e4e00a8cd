//go:build bulkhead_placeholder

package main

const buildTags = "bulkhead_placeholder"
