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

// Open maps path read-only. Writes through its bytes fault, which is the
// point. The file stays open with the mapping (see Map). Errors do not
// repeat the path: callers name the file in their own prefix.
func Open(path string) (*Map, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, withoutPath(err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, withoutPath(err)
	}
	size := st.Size()
	switch {
	case !st.Mode().IsRegular():
		err = fmt.Errorf("not a regular file (mode %v)", st.Mode())
	case size == 0:
		// mmap rejects empty lengths; the parser reports the truncation.
		fh.Close()
		return &Map{}, nil
	case size > math.MaxInt:
		err = fmt.Errorf("file is %d bytes, more than this platform can map", size)
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	data, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return &Map{data: data, file: fh}, nil
}

func unmap(data []byte) error {
	if data == nil {
		return nil
	}
	return unix.Munmap(data)
}

// Drop advises the kernel that bytes [lo, hi) of the mapping are not
// needed soon, so their pages leave the process's resident set (they
// stay valid, and are read back if touched). Only whole pages are
// dropped, and not the one holding hi, where the next tensor may start.
// The advice is a hint: a failure leaves the pages resident, which costs
// memory, not correctness, so it is not reported.
func (m *Map) Drop(lo, hi int) {
	mapped := m.Bytes()
	if m == nil || m.file == nil || lo < 0 || hi > len(mapped) {
		return
	}
	page := os.Getpagesize()
	lo, hi = lo/page*page, hi/page*page
	if lo < hi {
		_ = unix.Madvise(mapped[lo:hi], unix.MADV_DONTNEED)
	}
}

// isBadAddress reports a system call's EFAULT: it was handed memory that
// is not there, as a mapping is past the end of a file cut short.
func isBadAddress(err error) bool { return errors.Is(err, unix.EFAULT) }
