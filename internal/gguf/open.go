package gguf

import (
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
)

// Open memory-maps the GGUF file at path read-only and parses it. The
// tensors' Data slices alias the mapping until Close. The file must not be
// truncated or rewritten while it is open: the mapping would then fault on
// access, which no check here can prevent.
func Open(path string) (*File, error) {
	m, err := mmapfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s%w", prefix(path), err)
	}
	f, err := parse(path, m.Bytes())
	if err != nil {
		if uerr := m.Close(); uerr != nil {
			return nil, fmt.Errorf("%w (and unmap: %v)", err, uerr)
		}
		return nil, err
	}
	f.mapping = m
	return f, nil
}
