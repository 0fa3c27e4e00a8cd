//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package mmapfile

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapped reports that Open maps files rather than reading them.
const Mapped = true

// Open maps path read-only and returns its bytes and a function that
// unmaps them. Writes through the slice fault, which is the point. Errors
// do not repeat the path: callers name the file in their own prefix.
//
// The descriptor stays open with the mapping, so that Guard can ask the
// mapped file itself (fstat) whether it shrank: the path may by then name
// another file. Unmapping closes it; a second call does nothing.
func Open(path string) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, withoutPath(err)
	}
	data, err := mapFile(fh)
	if err != nil || data == nil {
		fh.Close()
		return nil, func() error { return nil }, err
	}
	m := &mapping{data: data, file: fh}
	live.add(m)
	var once sync.Once
	return data, func() error {
		var err error
		once.Do(func() {
			live.remove(m)
			err = errors.Join(unix.Munmap(data), fh.Close())
		})
		return err
	}, nil
}

// mapFile maps fh whole; nil for an empty file, which mmap cannot map
// (the parser reports the truncation).
func mapFile(fh *os.File) ([]byte, error) {
	st, err := fh.Stat()
	if err != nil {
		return nil, withoutPath(err)
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (mode %v)", st.Mode())
	}
	if size == 0 {
		return nil, nil
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("file is %d bytes, more than this platform can map", size)
	}
	data, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return data, nil
}

// mapping is one live mapping from Open and the file it maps.
type mapping struct {
	data []byte
	file *os.File
}

// live holds the mappings from Open that are not yet unmapped: a process
// maps a handful of model files, so a list is enough.
var live mappings

type mappings struct {
	mu sync.Mutex
	ms []*mapping
}

func (l *mappings) add(m *mapping) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ms = append(l.ms, m)
}

func (l *mappings) remove(m *mapping) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.ms, m); i >= 0 {
		l.ms = slices.Delete(l.ms, i, i+1)
	}
}

// shrunk reports whether the file mapped under b (part or all of a
// mapping from Open) now ends before b does, asking the mapped file
// itself; known is false when b is in no live mapping from Open. A file
// that cannot be asked counts as shrunk: it could not be read either.
func shrunk(b []byte) (short, known bool) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	live.mu.Lock()
	defer live.mu.Unlock()
	for _, m := range live.ms {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(m.data)))
		if p < lo || p-lo >= uintptr(len(m.data)) {
			continue
		}
		end := int64(p-lo) + int64(len(b))
		st, err := m.file.Stat() // fstat: the mapped file, whatever its name now
		return err != nil || st.Size() < end, true
	}
	return false, false
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
