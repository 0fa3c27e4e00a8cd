//go:build linux

package kernels

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
)

// A worker that faults on a mapped file cut short (a model file truncated
// under the server) panics instead of killing the process, and the panic
// reaches the caller, where mmapfile.Fault recognises it; the Pool runs
// the next job as usual.
func TestWorkerFaultReachesTheCaller(t *testing.T) {
	p := twoThreads(t)
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "weights")
	if err := os.WriteFile(path, make([]byte, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mmapfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data := m.Bytes()
	if err := os.Truncate(path, int64(page)); err != nil {
		t.Fatal(err)
	}
	caller := goid()
	var sink byte
	var r any
	for try := 0; try < 20 && r == nil; try++ {
		r = catch(func() {
			p.For(64, func(_, lo, hi int) {
				if goid() == caller {
					time.Sleep(time.Millisecond) // leave chunks to the worker
					return
				}
				sink += data[3*page] // past the file's new end
			})
		})
	}
	if r == nil {
		t.Skip("no chunk ever ran on the worker")
	}
	if mmapfile.Fault(r, data) == nil {
		t.Fatalf("the caller got %v; want a fault inside the mapping", r)
	}
	within(t, 10*time.Second, "For and MatMul after a worker fault", func() { checkPoolWorks(t, p) })
}
