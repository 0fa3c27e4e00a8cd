package llama2c

import (
	"errors"
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
)

// Open memory-maps the checkpoint at path read-only and parses it, as
// gguf.Open does for GGUF files: the tensors' Data alias the mapping, so
// opening costs address space, not memory, whatever the checkpoint's size
// (a 7B model is 27 GB of float32). Pages are read from the file as the
// tensors are used; Evict hands back those of a tensor done with.
//
// Close unmaps the file, after which no tensor's Data may be touched. The
// file must not be truncated or rewritten while it is open: the mapping
// would then fault on access, which no check here can prevent. On
// platforms without mmap the file is read into memory instead.
func Open(path string) (*Checkpoint, error) {
	m, err := mmapfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama2c %s: %w", path, err)
	}
	c, err := Parse(path, m.Bytes())
	if err != nil {
		if uerr := m.Close(); uerr != nil {
			return nil, fmt.Errorf("%w (and unmap: %v)", err, uerr)
		}
		return nil, err
	}
	c.mapping, c.path = m, path
	return c, nil
}

// Guard runs f, which reads the checkpoint's tensors, and returns a
// fault on the mapping (the file was truncated while open) as an error
// naming the file and wrapping mmapfile.ErrChanged, instead of letting
// the process die of SIGBUS. It guards only the calling goroutine; for a
// checkpoint from Parse it just calls f.
func (c *Checkpoint) Guard(f func() error) error {
	err := c.mapping.Guard(f)
	if errors.Is(err, mmapfile.ErrChanged) {
		return fmt.Errorf("llama2c %s: %w", c.path, err)
	}
	return err
}

// Mapping returns the bytes Open mapped, which the tensors' Data alias;
// nil for a checkpoint from Parse (see gguf.File.Mapping).
func (c *Checkpoint) Mapping() []byte { return c.mapping.Bytes() }

// Close unmaps a checkpoint from Open; for one from Parse it does nothing.
// Closing twice is harmless.
func (c *Checkpoint) Close() error {
	m := c.mapping
	c.mapping = nil
	return m.Close()
}

// Evict tells the kernel that tensor i of a checkpoint from Open will not
// be read again soon, so the pages it was read into leave this process's
// resident set. Without it a conversion that reads every tensor once ends
// with the whole checkpoint resident: clean file pages the kernel could
// reclaim, but counted as the process's memory by monitors and by the
// out-of-memory killer's choice of victim. The data stay valid; touching
// them again reads them back. For a checkpoint from Parse, or where the
// platform cannot be told, it does nothing.
func (c *Checkpoint) Evict(i int) {
	if i < 0 || i >= len(c.spans) {
		return
	}
	c.mapping.Drop(c.spans[i][0], c.spans[i][1])
}
