//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mmapfile

import "os"

// Mapped reports that Open maps files rather than reading them.
const Mapped = false

// Open reads the whole file on platforms without mmap. It costs memory
// equal to the file size, but keeps every reader working everywhere.
func Open(path string) (*Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, withoutPath(err)
	}
	return &Map{data: data}, nil
}

func unmap([]byte) error { return nil }

// Drop does nothing: the file is in the heap, not mapped.
func (m *Map) Drop(lo, hi int) {}

// isBadAddress is false: files are read, not mapped, here.
func isBadAddress(error) bool { return false }
