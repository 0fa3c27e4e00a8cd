//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package llama2c

import "os"

// mmapped reports that Open maps files rather than reading them.
const mmapped = false

// mapFile reads the whole file on platforms without mmap, as package gguf
// does there. It costs memory equal to the file size, but keeps Open
// working everywhere.
func mapFile(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, withoutPath(err)
	}
	return data, func() error { return nil }, nil
}

// dropPages does nothing: the checkpoint is in the heap, not mapped.
func dropPages([]byte, int, int) {}
