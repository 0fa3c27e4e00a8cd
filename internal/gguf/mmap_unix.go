//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps path read-only and returns its bytes and a function that
// unmaps them. Writes through the slice fault, which is the point: tensor
// data is never modified.
func mapFile(path string) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	// The mapping outlives the descriptor.
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file (mode %v)", st.Mode())
	}
	if size == 0 {
		// mmap rejects empty lengths; the parser reports the truncation.
		return nil, func() error { return nil }, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("file is %d bytes, more than this platform can map", size)
	}
	data, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
