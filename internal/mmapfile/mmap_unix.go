//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package mmapfile

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Mapped reports that Open maps files rather than reading them.
const Mapped = true

// Open maps path read-only and returns its bytes and a function that
// unmaps them. Writes through the slice fault, which is the point. Errors
// do not repeat the path: callers name the file in their own prefix.
func Open(path string) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, withoutPath(err)
	}
	// The mapping outlives the descriptor.
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, withoutPath(err)
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
	data, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

// Drop advises the kernel that bytes [lo, hi) of a mapping from Open are
// not needed soon, so their pages leave the process's resident set (they
// stay valid, and are read back if touched). Only whole pages are
// dropped, and not the one holding hi, where the next tensor may start.
// The advice is a hint: a failure leaves the pages resident, which costs
// memory, not correctness, so it is not reported.
func Drop(mapped []byte, lo, hi int) {
	page := os.Getpagesize()
	lo, hi = lo/page*page, hi/page*page
	if lo < hi {
		_ = unix.Madvise(mapped[lo:hi], unix.MADV_DONTNEED)
	}
}

// isBadAddress reports a system call's EFAULT: it was handed memory that
// is not there, as a mapping is past the end of a file cut short.
func isBadAddress(err error) bool { return errors.Is(err, unix.EFAULT) }
