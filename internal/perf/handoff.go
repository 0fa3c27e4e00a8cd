package perf

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"
)

// HandoffLatency returns the median time, over reps passes, for two
// threads to pass a cache line to each other and back: one writes it, the
// other waits to see the write and answers. It returns 0 where the process
// cannot run two threads at once (GOMAXPROCS < 2).
//
// It tells where the host placed the two threads a 2-thread decode runs
// on, which the read bandwidth depends on. On the 2-core virtual machines
// Bulkhead is measured on it reads about 60 ns most of the time and about
// 330 ns for tens of seconds at a time: two hardware threads of one core,
// sharing its caches and its share of memory (2 threads read about 35 GB/s,
// hardly more than one), and then two cores far apart, each with its own
// (2 threads read about 60 GB/s). A decode's passes hand their inputs
// and outputs between the threads dozens of times a token, so it gains
// less from the second placement than the read probe does.
func HandoffLatency(reps int) time.Duration {
	if runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	const rounds = 4096
	var line struct {
		_ [64]byte
		v atomic.Int64
		_ [64]byte
	}
	d := make([]time.Duration, 0, max(reps, 1))
	for range max(reps, 1) {
		line.v.Store(0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := int64(1); i < 2*rounds; i += 2 {
				wait(&line.v, i)
				line.v.Store(i + 1)
			}
		}()
		start := time.Now()
		for i := int64(0); i < 2*rounds; i += 2 {
			line.v.Store(i + 1)
			wait(&line.v, i+2)
		}
		d = append(d, time.Since(start)/rounds)
		<-done
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// wait polls v until it holds want, yielding now and then so that a
// partner descheduled by the OS or the Go scheduler still gets to run.
func wait(v *atomic.Int64, want int64) {
	for n := 0; v.Load() != want; n++ {
		if n&1023 == 1023 {
			runtime.Gosched()
		}
	}
}
