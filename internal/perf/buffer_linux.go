package perf

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is the size of a transparent huge page on the platforms
// Bulkhead runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePageSize = 2 << 20

// readBuffer returns words float32s of anonymous memory advised for
// transparent huge pages, and a function that unmaps it. The bandwidth is
// the bound decode is judged against, so it must be the best the machine
// can stream: weights mapped from the page cache are mostly in huge
// pages on current kernels (large folios), and a buffer from the Go heap
// is not (the runtime leaves THP to the system's default, which is often
// "madvise"). On this VM the heap buffer read about 5% slower. Where the
// kernel refuses the advice the buffer is still correct, only slower.
func readBuffer(words int) ([]float32, func()) {
	size := words * 4
	mem, err := unix.Mmap(-1, 0, size+hugePageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]float32, words), func() {}
	}
	off := int((hugePageSize - uintptr(unsafe.Pointer(&mem[0]))%hugePageSize) % hugePageSize)
	_ = unix.Madvise(mem[off:off+size], unix.MADV_HUGEPAGE)
	return unsafe.Slice((*float32)(unsafe.Pointer(&mem[off])), words), func() { _ = unix.Munmap(mem) }
}
