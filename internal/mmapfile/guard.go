package mmapfile

import (
	"errors"
	"fmt"
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
