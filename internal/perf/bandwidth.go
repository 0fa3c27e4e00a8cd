// Package perf measures the machine's two physical limits: memory read
// bandwidth, which single-stream decode speed is judged against, and the
// arithmetic ceiling of the batched products (MACRate), which prefill and
// batched decode are judged against. It also measures how far apart two
// threads run (HandoffLatency), since on a shared host that placement
// changes the first limit, and how much of it a decode can use.
//
// It owns no model code. It reads a buffer far larger than the caches, as a
// forward pass reads weights, and it times the kernels' own innermost
// instruction sequence with its operands in L1, so that "fraction of the
// bound reached" means the same thing on every machine.
package perf

import (
	"sync"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// ReadBandwidth returns the best observed read bandwidth in bytes per
// second when threads goroutines each sum their share of a size-byte
// buffer, over reps passes.
func ReadBandwidth(size int, threads, reps int) float64 {
	if threads < 1 {
		threads = 1
	}
	words := size / 4
	buf, free := readBuffer(words)
	defer free()
	for i := range buf {
		buf[i] = float32(i & 1023) // touch every page so reads hit memory, not the zero page
	}
	chunk := words / threads &^ 1
	var best float64
	var sink float32
	var mu sync.Mutex
	for r := 0; r < reps; r++ {
		var wg sync.WaitGroup
		start := time.Now()
		for t := 0; t < threads; t++ {
			part := buf[t*chunk : (t+1)*chunk]
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := readAll(part)
				mu.Lock()
				sink += s
				mu.Unlock()
			}()
		}
		wg.Wait()
		if bw := float64(threads*chunk*4) / time.Since(start).Seconds(); bw > best {
			best = bw
		}
	}
	if sink == 42.5 { // keep the sums observable so the reads are not optimised away
		best += 0
	}
	return best
}

// readAll reads every float once with the SIMD dot product (its two
// halves against each other), the same kind of vector loads a matrix
// product issues, so the figure is what the kernels can stream, not what a
// scalar loop can.
func readAll(b []float32) float32 {
	h := len(b) / 2
	return kernels.Dot(b[:h], b[h:2*h])
}
