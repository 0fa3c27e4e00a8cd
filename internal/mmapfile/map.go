package mmapfile

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

// Map is a file opened by Open: its bytes, mapped read-only where the
// platform can (Mapped), and the file itself, held open for as long as
// the mapping lives so that Guard can ask it (not the path, which may by
// then name another file) whether it shrank. The zero Map holds nothing:
// its Bytes are empty and Close does nothing.
type Map struct {
	data  []byte
	file  *os.File // nil where the file was read whole, not mapped
	close sync.Once
}

// Bytes returns the file's bytes. They alias the mapping: none may be
// used after Close.
func (m *Map) Bytes() []byte {
	if m == nil {
		return nil
	}
	return m.data
}

// Close unmaps the bytes and closes the file. A second call does nothing.
func (m *Map) Close() error {
	if m == nil {
		return nil
	}
	var err error
	m.close.Do(func() {
		err = unmap(m.data)
		if m.file != nil {
			err = errors.Join(err, m.file.Close())
		}
		m.data, m.file = nil, nil
	})
	return err
}

// Guard runs f on the calling goroutine and turns a memory fault inside
// the mapping into an error wrapping ErrChanged, where the process would
// otherwise die of SIGBUS with a runtime stack dump. A mapping keeps the
// length the file had when it was mapped; a reader cannot check that each
// access is still backed by the file, so the fault is the only notice it
// gets. A system call handed bytes of the mapping that are gone (a write
// straight from it) fails with EFAULT instead of faulting; f's error is
// then ErrChanged too when the mapped file is now shorter than the
// mapping, or cannot be asked. The mapped file is asked (fstat), not its
// path: a full-size file renamed over the cut-short one would hide the
// cut.
//
// Only f's own goroutine is guarded (SetPanicOnFault is per goroutine),
// not goroutines f starts. A fault outside the mapping is a bug, not a
// file that changed: it and every other panic pass through. Without a
// mapping (a file read whole, or the zero Map) Guard only calls f.
func (m *Map) Guard(f func() error) (err error) {
	mapped := m.Bytes()
	if len(mapped) == 0 || m.file == nil {
		return f()
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if err = Fault(r, mapped); err == nil {
				panic(r)
			}
		}
	}()
	err = f()
	if isBadAddress(err) {
		if fi, serr := m.file.Stat(); serr != nil || fi.Size() < int64(len(mapped)) {
			err = fmt.Errorf("%w: %v", ErrChanged, err)
		}
	}
	return err
}
