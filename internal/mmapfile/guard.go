package mmapfile

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"unsafe"
)

// ErrChanged is wrapped by the error Guard returns when a mapping faulted:
// another process truncated the file (or rewrote it in place) while it
// was mapped, and the pages past its new end are gone; or the device
// could not read them back (an I/O error faults the same way).
var ErrChanged = errors.New("the file shrank, was rewritten, or could not be read while it was mapped (changed by another process?)")

// faultAddr is what a runtime.Error raised under SetPanicOnFault carries:
// the address that faulted.
type faultAddr interface {
	error
	Addr() uintptr
}

// Guard runs f on the calling goroutine and turns a memory fault inside
// mapped (the mapping of path from Open) into an error wrapping
// ErrChanged, where the process would otherwise die of SIGBUS with a
// runtime stack dump. A mapping keeps the length the file had when it was
// mapped; a reader cannot check that each access is still backed by the
// file, so the fault is the only notice it gets. A system call handed
// bytes of the mapping that are gone (a write straight from it) fails
// with EFAULT instead of faulting; f's error is then ErrChanged too when
// the mapped file is now shorter than the mapping. That is asked of the
// mapped file itself (Open keeps its descriptor), not of path, which a
// full-size file renamed over the cut-short one would answer for; only a
// mapping that is not from Open falls back to the file at path.
//
// Only f's own goroutine is guarded (SetPanicOnFault is per goroutine),
// not goroutines f starts. A fault outside mapped is a bug, not a file
// that changed: it and every other panic pass through. With no mapping
// (a file read whole, or nil) Guard only calls f.
func Guard(path string, mapped []byte, f func() error) (err error) {
	if len(mapped) == 0 {
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
		short, known := shrunk(mapped)
		if !known {
			fi, serr := os.Stat(path)
			short = serr != nil || fi.Size() < int64(len(mapped))
		}
		if short {
			err = fmt.Errorf("%w: %v", ErrChanged, err)
		}
	}
	return err
}

// Fault returns an error wrapping ErrChanged when r, a recovered panic
// value (or an error wrapping one, as kernels.Pool's worker panics do),
// is a memory fault inside mapped under SetPanicOnFault; else nil, and
// the caller should panic on with r: a fault elsewhere is a bug.
func Fault(r any, mapped []byte) error {
	err, _ := r.(error)
	var fa faultAddr
	if len(mapped) == 0 || !errors.As(err, &fa) {
		return nil
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mapped)))
	if a := fa.Addr(); a < lo || a-lo >= uintptr(len(mapped)) {
		return nil
	}
	return fmt.Errorf("%w: byte %d of the mapping faulted", ErrChanged, fa.Addr()-lo)
}
