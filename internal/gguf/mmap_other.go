//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gguf

import "os"

// mapFile reads the whole file on platforms without syscall.Mmap. It costs
// memory equal to the file size, but keeps Open working everywhere.
func mapFile(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
