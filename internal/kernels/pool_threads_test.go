package kernels

import (
	"runtime"
	"testing"
)

// A Pool never has more threads than GOMAXPROCS: in a container limited
// to one CPU on a many-core host, NumCPU counts the host, and workers
// without a processor would only poll while holding the one the caller
// needs. threads <= 0 means one per GOMAXPROCS.
func TestNewPoolThreadsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, c := range []struct{ ask, want int }{{0, 1}, {-3, 1}, {1, 1}, {4, 1}} {
		p := NewPool(c.ask)
		if got := p.Threads(); got != c.want {
			t.Errorf("GOMAXPROCS 1: NewPool(%d) has %d threads, want %d", c.ask, got, c.want)
		}
		p.Close()
	}
	runtime.GOMAXPROCS(2)
	for _, c := range []struct{ ask, want int }{{0, 2}, {1, 1}, {2, 2}, {8, 2}} {
		p := NewPool(c.ask)
		if got := p.Threads(); got != c.want {
			t.Errorf("GOMAXPROCS 2: NewPool(%d) has %d threads, want %d", c.ask, got, c.want)
		}
		p.Close()
	}
}
