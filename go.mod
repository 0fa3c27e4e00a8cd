module github.com/bulkhead-llm/bulkhead

go 1.26.0

require (
	golang.org/x/sys v0.50.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
