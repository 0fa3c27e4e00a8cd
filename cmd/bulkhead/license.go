package main

import "github.com/bulkhead-llm/bulkhead/internal/embedded"

func embeddedLicense() string {
	return "The embedded default model, " + embedded.Name + ", is distributed under this licence:\n\n" + embedded.License
}
